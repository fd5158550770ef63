"""``read_audio`` takes the recordings users bring: any rate, width, channel count or container FFmpeg decodes
becomes the same 16 kHz mono samples; a file it cannot use is a clear error."""

import av
import numpy as np
import pytest

from simulmt.errors import SimulmtError
from simulmt.speech.wav import read_audio, write_wav


def tone(rate: int, seconds: float = 1.5) -> np.ndarray:
    """Two sines (440 Hz, 1,230 Hz) sampled at ``rate``: the same sound at any rate."""
    t = np.arange(int(rate * seconds)) / rate
    return 0.5 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1230 * t)


def encode(path, codec: str, rate: int, channels: int) -> None:
    """``tone(rate)`` written by FFmpeg's ``codec`` into ``path`` (its container from the name), every channel the
    same sound."""
    pcm = (tone(rate) * 32767).astype(np.int16)
    layout = "stereo" if channels == 2 else "mono"
    frame = av.AudioFrame.from_ndarray(np.repeat(pcm, channels).reshape(1, -1), format="s16", layout=layout)
    frame.sample_rate = rate
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        to_codec = av.AudioResampler(format=stream.codec_context.format.name, layout=layout, rate=rate)
        for piece in to_codec.resample(frame) + to_codec.resample(None):
            for packet in stream.encode(piece):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


@pytest.mark.parametrize("name,codec,rate,channels,within", [  # within: the error allowed, relative to the tone
    ("stereo-44k.wav", "pcm_s16le", 44100, 2, 0.001),
    ("float-48k.wav", "pcm_f32le", 48000, 1, 0.001),
    ("24bit-22k.wav", "pcm_s24le", 22050, 2, 0.001),
    ("8bit-16k.wav", "pcm_u8", 16000, 1, 0.02),  # (8 bits: the tone to within its quantisation)
    ("talk.flac", "flac", 44100, 2, 0.001),
    ("talk.mp3", "libmp3lame", 44100, 2, 0.06),  # (lossy codecs: the same sound, not the same samples)
    ("talk.opus", "libopus", 48000, 2, 0.03),
    ("talk.m4a", "aac", 44100, 1, 0.2),  # (AAC in MP4 keeps its encoder's priming samples)
])
def test_recordings_of_any_rate_width_channels_and_container_read_as_the_same_16k_mono(
        tmp_path, name, codec, rate, channels, within):
    encode(tmp_path / name, codec, rate, channels)
    samples = read_audio(tmp_path / name)
    assert samples.dtype == np.int16 and samples.ndim == 1
    expected = tone(16000)
    got = samples.astype(np.float64) / 32767
    lead = 0  # samples before the tone: none, but for the AAC encoder's priming (found by correlation)
    if codec == "aac":
        lead = max(range(2048 * 16000 // rate), key=lambda at: float(np.dot(got[at:at + 8000], expected[:8000])))
        assert lead > 0
    assert len(got) - lead >= len(expected), f"{name}: {len(got)} samples"  # nothing cut
    assert codec == "aac" or len(got) == len(expected), f"{name}: {len(got)} samples"  # nor added
    got = got[lead:lead + len(expected)]
    error = np.sqrt(np.mean((got - expected) ** 2)) / np.sqrt(np.mean(expected ** 2))
    assert error < within, f"{name}: relative error {error:.4f}"  # channels averaged, not summed; aligned in time


def test_a_16k_mono_16bit_wav_is_read_as_it_is(tmp_path, monkeypatch):
    from simulmt.speech import wav

    pcm = (tone(16000) * 32767).astype(np.int16)
    write_wav(tmp_path / "a.wav", pcm, 16000)
    decoded = np.concatenate(list(wav._decoded(tmp_path / "a.wav")))
    monkeypatch.setattr(wav, "_decoded", lambda path: pytest.fail("FFmpeg was asked to decode a plain WAV"))
    assert np.array_equal(read_audio(str(tmp_path / "a.wav")), pcm)
    assert np.array_equal(decoded, pcm)  # (and FFmpeg reads the same samples)


def test_a_wav_whose_sizes_were_never_written_is_read_whole(tmp_path):
    """A recorder stopped mid-file leaves 0 in the header's sizes: FFmpeg reads the samples that are there."""
    pcm = (tone(16000) * 32767).astype(np.int16)
    write_wav(tmp_path / "cut.wav", pcm, 16000)
    data = bytearray((tmp_path / "cut.wav").read_bytes())
    assert data[36:40] == b"data"
    data[4:8] = data[40:44] = (0).to_bytes(4, "little")
    (tmp_path / "cut.wav").write_bytes(bytes(data))
    assert np.array_equal(read_audio(tmp_path / "cut.wav"), pcm)


def test_a_damaged_stretch_in_the_middle_costs_only_that_stretch(tmp_path, capsys):
    encode(tmp_path / "talk.mp3", "libmp3lame", 44100, 2)
    data = bytearray((tmp_path / "talk.mp3").read_bytes())
    third = len(data) // 3
    data[third:third + 2000] = np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    (tmp_path / "talk.mp3").write_bytes(bytes(data))
    samples = read_audio(tmp_path / "talk.mp3")
    assert len(samples) >= 0.8 * len(tone(16000))  # the audio after the damage is there too
    assert "damaged packet(s) of its audio skipped" in capsys.readouterr().err


def test_a_pipe_is_decoded(tmp_path):
    import os
    import threading

    encode(tmp_path / "talk.flac", "flac", 16000, 1)
    os.mkfifo(tmp_path / "pipe")
    writer = threading.Thread(target=lambda: (tmp_path / "pipe").write_bytes((tmp_path / "talk.flac").read_bytes()))
    writer.start()
    samples = read_audio(tmp_path / "pipe")
    writer.join()
    assert np.array_equal(samples, read_audio(tmp_path / "talk.flac"))


def test_files_it_cannot_use_are_clear_errors(tmp_path):
    with pytest.raises(SimulmtError, match="audio file not found: .*missing.wav"):
        read_audio(tmp_path / "missing.wav")
    (tmp_path / "folder.wav").mkdir()
    with pytest.raises(SimulmtError, match="folder.wav is a folder, not a recording"):
        read_audio(tmp_path / "folder.wav")
    (tmp_path / "noise.wav").write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    with pytest.raises(SimulmtError, match="noise.wav: not an audio file FFmpeg can decode"):
        read_audio(tmp_path / "noise.wav")
    (tmp_path / "notes.txt").write_text("not a recording\n")
    with pytest.raises(SimulmtError, match="notes.txt: not an audio file"):
        read_audio(tmp_path / "notes.txt")
    write_wav(tmp_path / "empty.wav", np.zeros(0, dtype=np.int16), 16000)
    with pytest.raises(SimulmtError, match="empty.wav: the audio is empty"):
        read_audio(tmp_path / "empty.wav")
    write_wav(tmp_path / "empty-44k.wav", np.zeros(0, dtype=np.int16), 44100)
    with pytest.raises(SimulmtError, match="the audio is empty"):
        read_audio(tmp_path / "empty-44k.wav")


def test_a_file_without_an_audio_stream_is_a_clear_error(tmp_path):
    with av.open(str(tmp_path / "silent.mp4"), "w") as container:  # a video, no sound track
        stream = container.add_stream("mpeg4", rate=5)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    with pytest.raises(SimulmtError, match="silent.mp4: it holds no audio stream"):
        read_audio(tmp_path / "silent.mp4")


def test_bench_audio_takes_a_recording_by_its_extension_or_a_list_of_them(tmp_path):
    from simulmt.bench.speech import audio_files

    encode(tmp_path / "a.flac", "flac", 16000, 1)
    encode(tmp_path / "b.mp3", "libmp3lame", 44100, 2)
    assert audio_files(str(tmp_path / "a.flac")) == [tmp_path / "a.flac"]
    (tmp_path / "clips.list").write_text("a.flac\n\nb.mp3\n")
    assert audio_files(str(tmp_path / "clips.list")) == [tmp_path / "a.flac", tmp_path / "b.mp3"]
    (tmp_path / "clip.raw").write_bytes(bytes(range(128, 256)) * 10)  # not text, not a known extension
    with pytest.raises(SimulmtError, match="clip.raw .or a recording: its extension should be one of .*line 1"):
        audio_files(str(tmp_path / "clip.raw"))
    (tmp_path / "elsewhere").mkdir()  # a list linked from another folder: its names are relative to the list itself
    (tmp_path / "elsewhere" / "link.list").symlink_to(tmp_path / "clips.list")
    assert audio_files(str(tmp_path / "elsewhere" / "link.list")) == [tmp_path / "a.flac", tmp_path / "b.mp3"]
    (tmp_path / "empty.list").write_text("\n")
    with pytest.raises(SimulmtError, match="names no audio file"):
        audio_files(str(tmp_path / "empty.list"))
    (tmp_path / "gone.list").write_text("a.flac\nmissing.wav\n")
    with pytest.raises(SimulmtError, match="1 file.s. not found, e.g. .*missing.wav"):
        audio_files(str(tmp_path / "gone.list"))


def test_evaluate_source_audio_given_a_recording_says_it_takes_a_list(tmp_path):
    from simulmt.evaluation.testset import read_audio_test_set

    encode(tmp_path / "talk.mp3", "libmp3lame", 44100, 2)
    (tmp_path / "ref.de").write_text("Ein Ton.\n")
    with pytest.raises(SimulmtError, match="takes a list of recordings, one path per line .* not a recording"):
        read_audio_test_set(tmp_path / "talk.mp3", tmp_path / "ref.de")
    (tmp_path / "talk.list").write_text("talk.mp3\n")
    assert read_audio_test_set(tmp_path / "talk.list", tmp_path / "ref.de").sources == [str(tmp_path / "talk.mp3")]


@pytest.mark.parametrize("name,codec,rate", [("plain.wav", "pcm_s16le", 16000), ("talk.flac", "flac", 44100)])
def test_pieces_decoded_as_they_go_are_the_samples_read_whole(tmp_path, monkeypatch, name, codec, rate):
    from simulmt.speech import wav

    monkeypatch.setattr(wav, "CHUNK", 3000)  # (a plain WAV file read in several chunks)
    encode(tmp_path / name, codec, rate, 1)
    whole = read_audio(tmp_path / name)
    pieces = list(wav.audio_pieces(tmp_path / name, 7000))
    assert [len(x) for x in pieces[:-1]] == [7000] * (len(pieces) - 1) and 0 < len(pieces[-1]) <= 7000
    assert np.array_equal(np.concatenate(pieces), whole)


def test_probe_audio_fails_before_anything_runs(tmp_path):
    from simulmt.speech.wav import probe_audio

    encode(tmp_path / "talk.flac", "flac", 16000, 1)
    probe_audio(tmp_path / "talk.flac")
    (tmp_path / "notes.txt").write_text("not a recording")
    with pytest.raises(SimulmtError, match="not an audio file FFmpeg can decode"):
        probe_audio(tmp_path / "notes.txt")
    with pytest.raises(SimulmtError, match="audio file not found"):
        probe_audio(tmp_path / "gone.wav")
