"""From what a provider answered to a :class:`~agentfsm.errors.ChainError`.

The ``type`` says what went wrong, and so whether another attempt, or another
model, may succeed. Error bodies are the provider's text, which may echo the
request: :func:`redact` takes secrets out of every error before it leaves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agentfsm._errors import ChainError, ProviderError

__all__ = [
    "details",
    "error_for_provider_type",
    "error_for_status",
    "parse_json",
    "redact",
    "shown",
    "snippet",
]

_SNIPPET: Final = 500
_REDACTED: Final = "[redacted]"

#: Error types providers name in their bodies (OpenAI, Anthropic, compatible
#: servers), for errors that arrive without a status, inside a stream.
_PROVIDER_TYPES: Final[Mapping[str, str]] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
    "rate_limit_exceeded": "rate_limited",
    "insufficient_quota": "rate_limited",
    "authentication_error": "authentication",
    "permission_error": "authentication",
    "invalid_request_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
    "api_error": "server_error",
    "server_error": "server_error",
    "timeout_error": "timeout",
}

#: Secrets that look like secrets wherever they appear: the values of
#: credential headers and fields, bearer tokens, and ``sk-``-style keys.
_SECRET_PATTERNS: Final = re.compile(
    r"""(?ix)
    (?P<keep>(?:authorization|x-api-key|api[-_]?key|x-goog-api-key|proxy-authorization)
        ["']?\s*[:=]\s*["']?(?:bearer\s+|basic\s+)?)[^\s"',;}]+
    | (?P<bearer>bearer\s+)[A-Za-z0-9._~+/=-]{8,}
    | \b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}
    """
)


def snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def shown(value: Any) -> str:
    """A value as it may appear in an error: its repr, cut short."""
    return snippet(repr(value))


def details(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def redact(error: ChainError, secrets: Iterable[str] = ()) -> ChainError:
    """``error`` with ``secrets`` and anything shaped like a credential replaced
    in its message and details; the same object when there was nothing to hide."""
    known = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def clean(text: str) -> str:
        for secret in known:
            text = text.replace(secret, _REDACTED)
        return _SECRET_PATTERNS.sub(_mask, text)

    message = clean(error.message)
    found = _clean_value(dict(error.details), clean)
    if message == error.message and found == error.details:
        return error
    cleaned = ProviderError(error.type, message, retryable=error.retryable, details=found)
    cleaned.__cause__ = error.__cause__
    return cleaned


def _mask(match: re.Match[str]) -> str:
    prefix = match.group("keep") or match.group("bearer") or ""
    return prefix + _REDACTED


def _clean_value(value: Any, clean: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, Mapping):
        return {k: _clean_value(v, clean) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_value(v, clean) for v in value]
    return value


# ---------------------------------------------------------------- bodies


def parse_json(text: str | bytes, label: str, what: str) -> Any:
    """``text`` as JSON, or an ``invalid_response`` error saying what was malformed."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        shown = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ProviderError(
            "invalid_response",
            f"{label}: {what} is not valid JSON ({reason}): {snippet(shown)!r}",
        ) from None


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _provider_error(content: bytes) -> tuple[str, str | None, str | None]:
    """The provider's own message, error type and code from an error body."""
    raw = content.decode("utf-8", errors="replace")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return snippet(raw) or "(empty body)", None, None
    return _error_fields(data, raw)


def _error_fields(data: Any, raw: str = "") -> tuple[str, str | None, str | None]:
    if not isinstance(data, Mapping):
        return snippet(raw) or "(empty body)", None, None
    error = data.get("error", data)
    if not isinstance(error, Mapping):
        error = {"message": error}
    message = (
        _text(error.get("message"))
        or _text(error.get("detail"))
        or _text(data.get("message"))
        or _text(data.get("detail"))
        or snippet(raw or json.dumps(data))
    )
    return snippet(message), _text(error.get("type")), _text(error.get("code"))


def error_for_provider_type(label: str, error: Any) -> ChainError:
    """A ChainError for an error object a provider sent inside a stream (no status)."""
    body = error if isinstance(error, Mapping) and "error" in error else {"error": error}
    message, provider_type, code = _error_fields(body)
    kind = _PROVIDER_TYPES.get(provider_type or "") or _PROVIDER_TYPES.get(code or "")
    return ProviderError(
        kind or "server_error",
        f"{label}: the provider reported an error mid-stream"
        f"{f' ({provider_type})' if provider_type else ''}: {message}",
        details=details(provider_type=provider_type, code=code),
    )


def _status_type(status: int, provider_type: str | None) -> str:
    if status == 529 or provider_type == "overloaded_error":
        return "overloaded"
    if status in (401, 403):
        return "authentication"
    if status == 429:
        return "rate_limited"
    if status == 408:
        return "timeout"
    if status == 409:
        return "conflict"
    if status >= 500:
        return "server_error"
    if 400 <= status < 500:
        return "bad_request"
    return "invalid_response"


def error_for_status(
    label: str, status: int, url: object, content: bytes, headers: Mapping[str, str]
) -> ChainError:
    """The error of a non-2xx reply, from its status and the provider's body."""
    message, provider_type, code = _provider_error(content)
    hint = " Check the API key." if status == 401 else ""
    kind = _status_type(status, provider_type)
    return ProviderError(
        kind,
        f"{label}: HTTP {status} from {url}: {message}{hint}",
        # a conflict (a resource locked by a request in flight) passes, as the SDKs assume
        retryable=True if kind == "conflict" else None,
        details=details(
            status=status,
            provider_type=provider_type,
            code=code,
            request_id=headers.get("x-request-id") or headers.get("request-id"),
        ),
    )
