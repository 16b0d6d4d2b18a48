"""The policy process's side of edgemu's external-policy protocol.

A live run whose scheduler or agent has `policy = "external"` connects to
this process as a websocket client and sends one JSON text frame per
decision, a `DecisionRequest` `{"protocol": 1, "id", "problem": "lyreo" |
"repair", "obs": {"lyreo": {...}} | {"repair": {...}}}`; this server answers
each with a `DecisionReply` `{"id", "action", "error"}` (policies/src/
external.rs holds the format; the Rust types decode and encode it here too).

`fn(obs, info)` gets exactly the observation the Gymnasium environment
gives: for `"repair"` the 15 features (float32) with
`info["action_mask"]` (bool, 4), and returns an action 0..3; for `"lyreo"`
the dict `pairs` `(U, S, 12)`, `lengths` `(U, 2)`, `servers` `(S, 8)`,
`queues` `(S,)` (U: the slot's requests) and returns U server indices.
`info["problem"]` names the problem, `info["id"]` the request. An exception
in `fn`, or an action that is not JSON-able, is answered with `error` (the
run's fallback policy then decides); the server keeps serving.

    import edgemu
    edgemu.serve_policy(lambda obs, info: int(info["action_mask"].argmax()),
                        "ws://127.0.0.1:8765")
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Callable
from urllib.parse import urlparse

import numpy as np

from . import _core

PolicyFn = Callable[[Any, dict], Any]

#: Largest request frame accepted (a LYREO slot of U requests x S servers
#: is about 12 * U * S numbers).
MAX_FRAME_BYTES = 16 << 20


def _plain(a):
    """numpy values as plain Python values for JSON."""
    if isinstance(a, np.ndarray):
        return a.tolist()
    if isinstance(a, np.generic):
        return a.item()
    if isinstance(a, (list, tuple)):
        return [_plain(x) for x in a]
    return a


def _reply(fn: PolicyFn, text: "str | bytes") -> "tuple[str, bool]":
    """The reply frame to one request frame, and whether it has an action."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return _core.encode_reply(0, None, "bad request: a JSON text frame expected"), False
    try:
        rid, problem, obs, mask = _core.decode_request(text)
    except ValueError as e:
        return _core.encode_reply(_core.request_id(text) or 0, None, f"bad request: {e}"), False
    info = {"problem": problem, "id": rid}
    if mask is not None:
        info["action_mask"] = mask
    try:
        action_json = json.dumps(_plain(fn(obs, info)))
    except Exception as e:  # the policy's failure is the reply, never the server's
        return _core.encode_reply(rid, None, f"{type(e).__name__}: {e}"), False
    return _core.encode_reply(rid, action_json, None), True


def answer(fn: PolicyFn, text: "str | bytes") -> str:
    """The reply frame to one request frame (`fn` as for `serve_policy`)."""
    return _reply(fn, text)[0]


def _address(url: str) -> "tuple[str, int]":
    u = urlparse(url)
    if u.scheme not in ("ws", ""):
        raise ValueError(f"{url}: a ws://host:port URL expected (edgemu connects without TLS)")
    if u.hostname is None:
        raise ValueError(f"{url}: no host")
    return u.hostname, 8765 if u.port is None else u.port


class PolicyServer:
    """`serve_policy` running in a background thread (for tests and
    notebooks). `url` is the address it listens on (with the port chosen
    when the URL asked for port 0); `requests` and `errors` count the frames
    answered and those answered with an error. A context manager; `stop()`
    closes it."""

    def __init__(self, fn: PolicyFn, url: str = "ws://127.0.0.1:0"):
        self.fn = fn
        self._host, self._port = _address(url)
        self.url: "str | None" = None
        self.requests = 0
        self.errors = 0
        self._loop: "asyncio.AbstractEventLoop | None" = None
        self._stop: "asyncio.Future | None" = None
        self._ready = threading.Event()
        self._failure: "BaseException | None" = None
        self._thread = threading.Thread(target=self._run, name="edgemu-policy-server", daemon=True)

    def _answer(self, text) -> str:
        reply, ok = _reply(self.fn, text)
        self.requests += 1
        self.errors += not ok
        return reply

    async def _handler(self, ws):
        async for message in ws:
            await ws.send(self._answer(message))

    async def _main(self):
        from websockets.asyncio.server import serve

        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with serve(
            self._handler,
            self._host,
            self._port,
            max_size=MAX_FRAME_BYTES,
            compression=None,
        ) as server:
            port = server.sockets[0].getsockname()[1]
            self.url = f"ws://{self._host}:{port}"
            self._ready.set()
            await self._stop

    def _run(self):
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported by start()
            self._failure = e
        finally:
            self._ready.set()

    def start(self, timeout: float = 10.0) -> "PolicyServer":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the policy server did not start")
        if self._failure is not None:
            raise self._failure
        return self

    def serve_forever(self):
        """Runs in the calling thread until `stop()` (or Ctrl-C)."""
        try:
            asyncio.run(self._main())
        except KeyboardInterrupt:
            pass

    def stop(self, timeout: float = 10.0):
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> "PolicyServer":
        return self if self._thread.is_alive() else self.start()

    def __exit__(self, *exc):
        self.stop()


def serve_policy(fn: PolicyFn, url: str = "ws://127.0.0.1:8765") -> None:
    """Serves `fn` as an external policy at `url` (`ws://host:port`) until
    interrupted (Ctrl-C). See the module docstring for what `fn` gets."""
    server = PolicyServer(fn, url)
    print(f"edgemu policy server on {url}", flush=True)
    server.serve_forever()


def serve_policy_in_thread(fn: PolicyFn, url: str = "ws://127.0.0.1:0") -> PolicyServer:
    """Starts `serve_policy` in a daemon thread and returns the running
    `PolicyServer` (its `url` has the actual port; call `stop()` when done)."""
    return PolicyServer(fn, url).start()
