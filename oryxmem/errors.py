"""Domain errors and the one table of stable error codes.

The CLI turns these into one-line messages, the socket API into the
``{code, message, data, timestamp}`` envelope with the HTTP status given here.
A code, once published, never changes meaning.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorKind:
    code: int
    name: str
    http_status: int
    summary: str


ERROR_KINDS: tuple[ErrorKind, ...] = (
    ErrorKind(1001, "invalid_json", 400, "the request body is not valid JSON"),
    ErrorKind(1002, "invalid_field", 400, "a field is missing or has the wrong type"),
    ErrorKind(1003, "invalid_scope", 400, "scope must be 'core' or 'archival'"),
    ErrorKind(1004, "empty_content", 400, "content is empty after stripping"),
    ErrorKind(1005, "invalid_content", 400, "content holds a forbidden control character"),
    ErrorKind(1006, "content_too_long", 413, "content is longer than memory.max_content_chars"),
    ErrorKind(1007, "body_too_large", 413, "the request body is larger than allowed"),
    ErrorKind(1008, "unsafe_agent_name", 400, "the agent name is not a safe single path segment"),
    ErrorKind(1009, "empty_keyword", 400, "the recall keyword is empty"),
    ErrorKind(1010, "invalid_config", 400, "a configuration key or value is not valid"),
    ErrorKind(1011, "not_found", 404, "no such route or object"),
    ErrorKind(1012, "method_not_allowed", 405, "the route does not take this method"),
    ErrorKind(1013, "session_not_found", 404, "no session with this id"),
    ErrorKind(1014, "invalid_role", 400, "role must be user, assistant, system or tool"),
    ErrorKind(1015, "forbidden", 403, "the peer is not allowed to use this socket"),
    ErrorKind(1016, "request_timeout", 408, "the request did not arrive in time"),
    ErrorKind(2001, "memory_file_conflicted", 409, "MEMORY.md holds git conflict markers"),
    ErrorKind(2002, "memory_file_unreadable", 409, "MEMORY.md cannot be read as UTF-8 text"),
    ErrorKind(2003, "storage_error", 507, "the disk refused a write"),
    ErrorKind(2004, "workspace_not_found", 404, "no .oryxos workspace here"),
    ErrorKind(2005, "backend_unavailable", 501, "the configured memory backend is not available"),
    ErrorKind(2006, "daemon_unavailable", 503, "the daemon is not reachable"),
    ErrorKind(2007, "internal_error", 500, "an unexpected error; see the daemon log"),
    ErrorKind(2008, "daemon_already_running", 409, "a daemon already serves this workspace"),
)

_BY_NAME = {kind.name: kind for kind in ERROR_KINDS}


class OryxError(Exception):
    """An error a caller can act on: a stable code, an HTTP class, one clear line."""

    kind_name = "internal_error"

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data or {}

    @property
    def kind(self) -> ErrorKind:
        return _BY_NAME[self.kind_name]

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def http_status(self) -> int:
        return self.kind.http_status


class InvalidJsonError(OryxError):
    """The request body is not valid JSON."""

    kind_name = "invalid_json"


class InvalidFieldError(OryxError):
    """A field is missing or has the wrong type."""

    kind_name = "invalid_field"


class InvalidScopeError(OryxError):
    """Scope must be 'core' or 'archival'."""

    kind_name = "invalid_scope"


class EmptyContentError(OryxError):
    """Content is empty after stripping."""

    kind_name = "empty_content"


class InvalidContentError(OryxError):
    """Content holds a forbidden control character."""

    kind_name = "invalid_content"


class ContentTooLongError(OryxError):
    """Content is longer than memory.max_content_chars."""

    kind_name = "content_too_long"


class BodyTooLargeError(OryxError):
    """The request body is larger than allowed."""

    kind_name = "body_too_large"


class UnsafeAgentNameError(OryxError):
    """The agent name is not a safe single path segment."""

    kind_name = "unsafe_agent_name"


class EmptyKeywordError(OryxError):
    """The recall keyword is empty."""

    kind_name = "empty_keyword"


class InvalidConfigError(OryxError):
    """A configuration key or value is not valid."""

    kind_name = "invalid_config"


class NotFoundError(OryxError):
    """No such route or object."""

    kind_name = "not_found"


class MethodNotAllowedError(OryxError):
    """The route does not take this method."""

    kind_name = "method_not_allowed"


class SessionNotFoundError(OryxError):
    """No session with this id."""

    kind_name = "session_not_found"


class InvalidRoleError(OryxError):
    """Role must be user, assistant, system or tool."""

    kind_name = "invalid_role"


class ForbiddenError(OryxError):
    """The peer is not allowed to use this socket."""

    kind_name = "forbidden"


class RequestTimeoutError(OryxError):
    """The request did not arrive in time."""

    kind_name = "request_timeout"


class MemoryFileConflictedError(OryxError):
    """MEMORY.md holds git conflict markers."""

    kind_name = "memory_file_conflicted"


class MemoryFileUnreadableError(OryxError):
    """MEMORY.md cannot be read as UTF-8 text."""

    kind_name = "memory_file_unreadable"


class StorageError(OryxError):
    """The disk refused a write."""

    kind_name = "storage_error"


class WorkspaceNotFoundError(OryxError):
    """No .oryxos workspace here."""

    kind_name = "workspace_not_found"


class BackendUnavailableError(OryxError):
    """The configured memory backend is not available."""

    kind_name = "backend_unavailable"


class DaemonUnavailableError(OryxError):
    """The daemon is not reachable."""

    kind_name = "daemon_unavailable"


class InternalError(OryxError):
    """An unexpected error; see the daemon log."""

    kind_name = "internal_error"


class DaemonAlreadyRunningError(OryxError):
    """A daemon already serves this workspace."""

    kind_name = "daemon_already_running"


def error_for_code(code: int, message: str, data: object = None) -> OryxError:
    """The error a reply's code stands for, as the class the library raises."""
    for cls in OryxError.__subclasses__():
        if cls.kind_name in _BY_NAME and _BY_NAME[cls.kind_name].code == code:
            return cls(message, data=data if isinstance(data, dict) else None)
    return InternalError(f"{message} (code {code})")


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
