"""Speech input: audio features, Whisper's encoder, synthesised corpora."""
