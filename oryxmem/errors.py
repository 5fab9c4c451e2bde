"""Domain errors and the one table of stable error codes.

The CLI turns these into one-line messages, the socket API into the
``{code, message, data, timestamp}`` envelope with the HTTP status given here.
A code, once published, never changes meaning.
"""

from __future__ import annotations

import errno
import logging
import re
import sqlite3
from dataclasses import dataclass
from typing import Any, ClassVar


class OryxError(Exception):
    """An error a caller can act on: a stable code, an HTTP class, one clear line.

    Each kind is one subclass, and its line below is the only place its code, its
    HTTP status and its summary (the docstring) are written; ``ERROR_KINDS`` is the
    table built from them.
    """

    code: ClassVar[int]
    http_status: ClassVar[int]

    def __init_subclass__(cls, *, code: int, http_status: int, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code in _BY_CODE:
            raise TypeError(f"error code {code} is taken by {_BY_CODE[code].__name__}")
        cls.code, cls.http_status = code, http_status
        _BY_CODE[code] = cls

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data or {}


_BY_CODE: dict[int, type[OryxError]] = {}


class InvalidJsonError(OryxError, code=1001, http_status=400):
    """The request body is not valid JSON."""


class InvalidFieldError(OryxError, code=1002, http_status=400):
    """A field is missing or has the wrong type."""


class InvalidScopeError(OryxError, code=1003, http_status=400):
    """Scope must be 'core' or 'archival'."""


class EmptyContentError(OryxError, code=1004, http_status=400):
    """Content is empty after stripping."""


class InvalidContentError(OryxError, code=1005, http_status=400):
    """Content holds a forbidden control character."""


class ContentTooLongError(OryxError, code=1006, http_status=413):
    """Content is longer than memory.max_content_chars."""


class BodyTooLargeError(OryxError, code=1007, http_status=413):
    """The request body is larger than allowed."""


class UnsafeAgentNameError(OryxError, code=1008, http_status=400):
    """The agent name is not a safe single path segment."""


class EmptyKeywordError(OryxError, code=1009, http_status=400):
    """The recall keyword is empty."""


class InvalidConfigError(OryxError, code=1010, http_status=400):
    """A configuration key or value is not valid."""


class NotFoundError(OryxError, code=1011, http_status=404):
    """No such route or object."""


class MethodNotAllowedError(OryxError, code=1012, http_status=405):
    """The route does not take this method."""


class SessionNotFoundError(OryxError, code=1013, http_status=404):
    """No session with this id."""


class InvalidRoleError(OryxError, code=1014, http_status=400):
    """Role must be user, assistant, system or tool."""


class ForbiddenError(OryxError, code=1015, http_status=403):
    """The peer is not allowed to use this socket."""


class RequestTimeoutError(OryxError, code=1016, http_status=408):
    """The request did not arrive in time."""


class HostConfigError(OryxError, code=1017, http_status=400):
    """An agent host's config file cannot be read or changed as asked."""


class WrongWorkspaceError(OryxError, code=1018, http_status=409):
    """The daemon on this socket serves another workspace than the one meant."""


class MalformedRequestError(OryxError, code=1019, http_status=400):
    """The request is not HTTP the daemon can read."""


class TranscriptChangedError(OryxError, code=1020, http_status=409):
    """An imported transcript no longer begins with what was imported from it."""


class SemanticSearchOffError(OryxError, code=1021, http_status=409):
    """A search by meaning only, where recall.embedder is none."""


class EntryNotFoundError(OryxError, code=1022, http_status=409):
    """The entry is not in MEMORY.md (any more): it changed or went since it was read."""


class SecretRefusedError(OryxError, code=1023, http_status=422):
    """The content looks like a credential (memory.secrets = refuse): nothing was written."""


class NotARepositoryError(OryxError, code=1024, http_status=409):
    """The workspace is not in a git repository, or git is not installed."""


class MemoryFileConflictedError(OryxError, code=2001, http_status=409):
    """MEMORY.md holds git conflict markers."""


class MemoryFileUnreadableError(OryxError, code=2002, http_status=409):
    """MEMORY.md cannot be read as UTF-8 text."""


class StorageError(OryxError, code=2003, http_status=507):
    """The disk refused a write."""


class WorkspaceNotFoundError(OryxError, code=2004, http_status=404):
    """No .oryxos workspace here."""


class BackendUnavailableError(OryxError, code=2005, http_status=501):
    """The configured memory backend is not available."""


class DaemonUnavailableError(OryxError, code=2006, http_status=503):
    """The daemon is not reachable."""


class InternalError(OryxError, code=2007, http_status=500):
    """An unexpected error; see the daemon log."""


class DaemonAlreadyRunningError(OryxError, code=2008, http_status=409):
    """A daemon already serves this workspace."""


class EmbedderUnavailableError(OryxError, code=2009, http_status=503):
    """The embedder cannot embed now (its server is down, its model file is wrong)."""


class FileBusyError(OryxError, code=2010, http_status=409):
    """MEMORY.md kept changing while an edit was planned, or git is mid-operation."""


# A bare OryxError is an internal one.
OryxError.code, OryxError.http_status = InternalError.code, InternalError.http_status


@dataclass(frozen=True)
class ErrorKind:
    code: int
    name: str
    http_status: int
    summary: str


def _kind(cls: type[OryxError]) -> ErrorKind:
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__.removesuffix("Error")).lower()
    return ErrorKind(cls.code, name, cls.http_status, (cls.__doc__ or "").strip().rstrip("."))


# The table of every code, in order: for documentation and for clients in other languages.
ERROR_KINDS: tuple[ErrorKind, ...] = tuple(_kind(_BY_CODE[code]) for code in sorted(_BY_CODE))


def error_for_code(code: int, message: str, data: object = None) -> OryxError:
    """The error a reply's code stands for, as the class the library raises."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return InternalError(f"{message} (code {code})")
    return cls(message, data=data if isinstance(data, dict) else None)


_DISK_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EROFS}
_SQLITE_DISK_WORDS = ("disk is full", "disk i/o error", "readonly database")


def disk_trouble(error: BaseException) -> str | None:
    """A one-line account of an error that comes from the disk (full, failing, read-only),
    or None for anything else. Those are logged as a line, not a traceback: they are the
    machine's state, not a bug, and everything retries once the disk is back."""
    if isinstance(error, StorageError):
        return error.message
    if isinstance(error, OSError) and error.errno in _DISK_ERRNOS:
        return str(error)
    if isinstance(error, sqlite3.Error) and any(
        word in str(error).lower() for word in _SQLITE_DISK_WORDS
    ):
        return f"the database: {error}"
    return None


def log_failure(logger: logging.Logger, what: str, error: BaseException) -> None:
    """One line for disk trouble, the traceback for anything else."""
    trouble = disk_trouble(error)
    if trouble:
        logger.warning("%s: %s", what, trouble)
    else:
        logger.error("%s", what, exc_info=error)
