"""Exceptions raised by simulmt.

Messages of :class:`SimulmtError` (and its subclasses) are meant for users: the
command line shows them verbatim, without a traceback.
"""


class SimulmtError(Exception):
    """Base class for errors with a user-facing message."""


class ModelNotFoundError(SimulmtError):
    """A model name could not be resolved to a packaged, local or hub model."""
