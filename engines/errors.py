"""Errors raised by engines, and what the service does with each.

EngineError
├── SpaceError          a search space or a parameter value is invalid (service: 422)
├── EngineOptionsError  unknown engine name or bad options (service: 422)
├── EngineUnsupported   the engine cannot handle this problem (service: 422)
├── EngineWorkTooLarge  a study or an ask over the engine's work caps (service: 422)
└── EngineRetryable     a transient numerical failure (service: 503 with Retry-After)
"""


class EngineError(Exception):
    """Base class of every error an engine raises on purpose."""


class SpaceError(EngineError, ValueError):
    """A search space definition or a parameter value is invalid; the message says what to fix."""


class EngineOptionsError(EngineError, ValueError):
    """The engine name is unknown or its options are invalid."""


class EngineUnsupported(EngineError):
    """The engine cannot handle this problem (for example, a single-objective-only engine)."""


class EngineWorkTooLarge(EngineError):
    """The study's dimension or the ask's ``count`` is over the engine's caps
    (``engines.limits``); the message says what to lower."""


class EngineRetryable(EngineError):
    """A transient failure: the same request may succeed when retried."""
