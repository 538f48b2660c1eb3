"""Dispatch of the parent's requests and notifications through jsonrpcserver.

This is the only module that imports jsonrpcserver; its types never leave it. The division of
labour:

* the wire's `Connection` does all decoding: framing, the envelope, and the typed params from
  the method table. What we hand jsonrpcserver is its own `Request` (the method, one positional
  param: the typed params Struct), so its json.loads and JSON-Schema check have nothing to do
  and are not called: we enter its pipeline at `dispatch_request`, after the parsing and
  validating steps of `dispatch_to_response_pure` and before its response building (Right/Left
  binds, namedtuple copies, `map`/`filter`/`starmap` over a one-request batch), which we would
  only throw away: half its cost per request (≈ 13 → 6.5 µs here).
* jsonrpcserver does the method lookup, the argument check and the call, synchronously, so no
  `asyncio.gather` and no task per request; a notification is simply not answered (the
  endpoint knows which it is). Each method it calls is a small synchronous wrapper that starts
  our async handler and hands the coroutine back through jsonrpcserver's `context` (a one-slot
  box); the dispatcher then awaits it. The wrapper carries a precomputed `__signature__`, so
  the argument check costs a bind, not a fresh `inspect.signature` walk per request.
* nothing jsonrpcserver produces reaches the wire. Errors we mean to send are `WireError`s; any
  other exception becomes the fixed internal-error sentence (`errors.to_wire_error`); anything
  jsonrpcserver answers on its own (its "Method not found", an internal error with `str(exc)`)
  is replaced by our own sentence. The endpoint encodes the answer.

Importing jsonrpcserver's dispatcher without its package `__init__` (`_core`): the package
`__init__` also imports its HTTP server (`http.server`) and its public wrappers (`main`), and
`main` builds, at import time, a JSON-Schema validator for the default `validator=` hook, which
pulls in jsonschema, referencing, attrs and rpds: ≈ 125 to 160 ms and ≈ 15 MiB in a child whose
handshake needs none of it (we pass our own validator). The pure dispatcher those wrappers call
(`jsonrpcserver.dispatcher`, whose `dispatch_request` we call) and its result types
import nothing of that, so we load jsonrpcserver's own package directory under a private name
whose `__init__` is never run and import just those modules from it. The real `jsonrpcserver`
stays untouched in `sys.modules`: a hosted agent that imports it gets the whole library as
usual (and when it is already imported, we use it).

Even that core, with oslash (whose package imports all of its monads for one `Either`), is
≈ 14 ms of a cold child's start. So it loads off the handshake's path: `initialize` (DIRECT)
is served by calling its handler, as jsonrpcserver would (the method looked up, the typed
params passed, the same error mapping), and the core is loaded by the session's warm-up
thread once that answer is on the wire (`preload`), or by the first request that needs it,
whichever comes first. The zygote preloads it once for all its children.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import ModuleType
from typing import Any

from tether.child.errors import INTERNAL_MESSAGE, to_wire_error
from tether.protocol import ErrorCode, WireError

_CORE_PACKAGE = "tether.child._jsonrpcserver"
"""The private name jsonrpcserver's package directory is loaded under (never executed)."""


def _core() -> tuple[ModuleType, ModuleType]:
    """jsonrpcserver's `dispatcher` and `result` modules, without its package `__init__`."""
    if "jsonrpcserver" in sys.modules:
        package = "jsonrpcserver"
    else:
        package = _CORE_PACKAGE
        if package not in sys.modules:
            # ≈ 0.35 ms, off the handshake's path like the rest of the core.
            from importlib.util import find_spec, module_from_spec, spec_from_file_location

            found = find_spec("jsonrpcserver")
            if found is None or found.origin is None:
                raise ImportError("jsonrpcserver is not installed")
            spec = spec_from_file_location(
                package, found.origin, submodule_search_locations=found.submodule_search_locations
            )
            assert spec is not None
            # Registered, never executed: its submodules' relative imports resolve inside it.
            sys.modules[package] = module_from_spec(spec)
    return (
        importlib.import_module(f"{package}.dispatcher"),
        importlib.import_module(f"{package}.result"),
    )


DIRECT = frozenset({"initialize"})
"""Served without jsonrpcserver, so the handshake never waits for its import."""


class _Core:
    """jsonrpcserver's `dispatch_request` and `Request`, its `Success` and oslash's `Left`,
    once loaded."""

    dispatch_request: Callable[..., Any]
    request: Callable[..., Any]
    success: Callable[[Any], Any]
    left: type


_loaded: _Core | None = None
_loading = threading.Lock()


def preloaded() -> bool:
    """Whether jsonrpcserver's dispatcher is loaded already (in a zygote's child: always)."""
    return _loaded is not None


def preload() -> _Core:
    """Load jsonrpcserver's dispatcher now (thread-safe; a no-op once done)."""
    global _loaded
    if _loaded is None:
        with _loading:
            if _loaded is None:
                from oslash.either import Left

                dispatcher, result = _core()
                core = _Core()
                core.dispatch_request = dispatcher.dispatch_request
                core.request = dispatcher.Request
                core.success = result.Success
                core.left = Left
                _loaded = core
    return _loaded


log = logging.getLogger("tether.child")

Handler = Callable[[Any], Awaitable[Any]]

_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("context", inspect.Parameter.POSITIONAL_ONLY),
        inspect.Parameter("params", inspect.Parameter.POSITIONAL_ONLY),
    ]
)


class Dispatcher:
    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        """`handlers` map a method name to an async callable taking the typed params."""
        self._methods = {name: _adapt(h) for name, h in handlers.items()}
        self._direct = {name: h for name, h in handlers.items() if name in DIRECT}

    async def request(self, method: str, params: Any) -> Any:
        """Serve one request: its result, or `WireError` to answer with."""
        direct = self._direct.get(method)
        if direct is not None:
            try:
                return await direct(params)
            except Exception as exc:
                raise to_wire_error(exc, method) from None
        return await self._dispatch(method, params, is_request=True)

    async def notification(self, method: str, params: Any) -> None:
        """Serve one notification; its errors are logged, never answered."""
        try:
            await self._dispatch(method, params, is_request=False)
        except WireError as exc:
            log.warning("notification %s failed: %s", method, exc.message)

    async def _dispatch(self, method: str, params: Any, *, is_request: bool) -> Any:
        core = _loaded or preload()
        started: list[Coroutine[Any, Any, Any]] = []
        # The id is jsonrpcserver's to keep (it builds no response here); the endpoint answers
        # the real one, and only for a request.
        _, result = core.dispatch_request(
            self._methods, started, core.request(method, [params], 0 if is_request else None)
        )
        if isinstance(result, core.left):
            for coro in started:
                coro.close()
            if not is_request:
                return None  # a notification is never answered, not even with an error
            _refuse(result, method)
        if not started:
            if is_request:
                log.error("dispatch of %s called no handler", method)
                raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
            return None
        try:
            return await started[0]
        except Exception as exc:
            raise to_wire_error(exc, method) from None


def _adapt(handler: Handler) -> Callable[..., Any]:
    def method(context: list[Coroutine[Any, Any, Any]], params: Any) -> Any:
        context.append(handler(params))  # type: ignore[arg-type]
        return (_loaded or preload()).success(None)

    method.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    return method


def _refuse(result: Any, method: str) -> None:
    """What jsonrpcserver refused on its own, as our own error (never its text)."""
    err = result._error
    if err.code == ErrorCode.METHOD_NOT_FOUND:
        raise WireError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
    log.error("dispatch of %s failed inside jsonrpcserver: %r", method, err)
    raise WireError(ErrorCode.INTERNAL_ERROR, INTERNAL_MESSAGE)
