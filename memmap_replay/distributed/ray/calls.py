"""Calls to shard actors that survive a restart: sent again once Ray has brought the actor back.

A shard actor made with ``max_restarts`` comes back from its folder when its process dies; a call that was
in flight fails with ``RayActorError`` (it may or may not have run), and calls sent meanwhile wait for
the new incarnation. ``ShardCall`` sends such a failed call again until it answers or ``timeout``
seconds have passed since it was first waited for (or, for a call nobody waits for, since it first
failed): then ``ShardUnavailableError``. An error raised by the actor's method itself (a bad input) is
raised as that error, not wrapped in Ray's ``RayTaskError``. Sending a call again is right for what a
learner sends (draws, priority updates: setting a priority twice sets it once), and at-least-once for an
``add_episode``: an episode whose commit finished just before the process died is stored twice.

A call a shard's rate limiter refuses (a ``Refused`` answer: nothing was done) is sent again after a pause
(1 ms, doubling up to 50 ms) until it is allowed, within the same ``timeout`` (``rate_limit="block"``),
or raises ``RateLimitedError`` at once (``rate_limit="raise"``); a refusal of a call sent before the wait
began (a request sent ahead) is first asked again, so that it stands for now (``limits.py``).
"""

from __future__ import annotations

import time
from typing import Any, cast

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from ...errors import RateLimitedError, ShardUnavailableError
from ...core.options import choice, timeout_option
from .limits import Refused

__all__ = ["ShardCall", "ShardUnavailableError", "call_shard"]

_BACKOFF = (0.02, 0.5)  # the first and the longest pause before a failed call is sent again
_RATE_BACKOFF = (0.001, 0.05)  # the first and the longest pause before a refused call is sent again
_RATE_LIMITS = ("block", "raise")


def _unwrapped(error: RayTaskError) -> BaseException:
    """The exception the actor's method raised (with its message as the library words it)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class ShardCall:
    """``actor.<method>.remote(*args, **kwargs)``, sent again after the actor died (see the module)."""

    __slots__ = ("actor", "method", "args", "kwargs", "timeout", "what", "ref", "deadline", "pause", "rate_limit",
                 "refused", "wait", "sent")

    def __init__(self, actor: Any, method: str, *args: Any, timeout: float = 60.0, what: str = "a shard",
                 rate_limit: str = "block", **kwargs: Any):
        self.actor, self.method, self.args, self.kwargs = actor, method, args, kwargs
        self.timeout, self.what = timeout_option(timeout), what
        self.rate_limit = choice(rate_limit, "rate_limit", _RATE_LIMITS)
        self.deadline: float | None = None
        self.pause, self.wait = _BACKOFF[0], _RATE_BACKOFF[0]
        self.refused: list[Refused] = []  # the refusals met so far (each says what the call did anyway)
        self.ref = self._send()

    def _send(self):
        self.sent = time.monotonic()
        return getattr(self.actor, self.method).remote(*self.args, **self.kwargs)

    def _unavailable(self, reason: str) -> ShardUnavailableError:
        return ShardUnavailableError(
            f"{self.what} did not answer {self.method}() within {self.timeout:g} s ({reason}): its actor died and "
            f"was not restarted (make it with max_restarts, e.g. create_shard(...); or it spent them all), or it "
            f"is still restarting (pass a longer timeout=)")

    def _rate_limited(self, refusal: Refused, when: str) -> RateLimitedError:
        return RateLimitedError(f"{self.what} did not allow {self.method}() {when}: {refusal.message}; pass "
                                f"rate_limit='block' and a longer timeout= to wait for room, or keep the other "
                                f"side running")

    def _again(self, error: RayActorError, *, wait: bool) -> None:
        """Send the call again, unless the deadline has passed or the actor could not start."""
        if getattr(error, "actor_init_failed", False):  # its constructor raised: no restart will help
            lines = [line.strip() for line in str(getattr(error, "error_msg", error)).splitlines() if line.strip()]
            raise ShardUnavailableError(f"{self.what} could not start, so it cannot answer {self.method}(): its "
                                        f"constructor raised {lines[-1] if lines else error!r}; fix what was given "
                                        f"to create_shard (or to the folder)") from error
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.timeout
        if now >= self.deadline:
            raise self._unavailable(f"last error: {type(error).__name__}") from error
        if wait:
            time.sleep(min(self.pause, max(0.0, self.deadline - now)))
            self.pause = min(2 * self.pause, _BACKOFF[1])
        self.ref = self._send()

    def _limited(self, refusal: Refused, began: float) -> None:
        """Send a refused call again: at once if it was sent before ``began`` (the refusal may be stale),
        else after a pause within the deadline (``rate_limit="block"``); or raise ``RateLimitedError``."""
        self.refused.append(refusal)
        self.kwargs.update(refusal.resend)
        now = time.monotonic()
        deadline = cast(float, self.deadline)  # (result() set it before it asked)
        if self.sent >= began and (self.rate_limit == "raise" or now + self.wait >= deadline):
            self.ref = None  # the next result() asks again
            when = "(rate_limit='raise')" if self.rate_limit == "raise" else f"within timeout={self.timeout:g} s"
            raise self._rate_limited(refusal, when)
        if self.sent >= began:
            time.sleep(self.wait)
            self.wait = min(2 * self.wait, _RATE_BACKOFF[1])
        self.ref = self._send()

    def result(self, *, settle: bool = False) -> Any:
        """Wait for the answer (sending the call again across a restart, and while the shard's rate limiter
        refuses it, as ``rate_limit`` says), or raise. After a ``RateLimitedError`` it asks again.
        ``settle=True``: a refused call is not sent again (its answer is None)."""
        began, refusals = time.monotonic(), len(self.refused)
        if self.ref is None:  # refused before: ask again now, with a deadline of its own
            if settle:
                return None
            self.ref, self.deadline, self.wait = self._send(), None, _RATE_BACKOFF[0]
        if self.deadline is None:
            self.deadline = began + self.timeout
        while True:
            try:
                answer = ray.get(self.ref, timeout=max(0.0, self.deadline - time.monotonic()))
            except RayTaskError as error:
                raise _unwrapped(error) from error
            except GetTimeoutError:
                if len(self.refused) > refusals:  # alive and refusing: the deadline passed on a call sent again
                    self.deadline = None  # (still in flight: the next result() waits for its answer)
                    raise self._rate_limited(self.refused[-1], f"within timeout={self.timeout:g} s") from None
                raise self._unavailable("no answer") from None
            except RayActorError as error:
                self._again(error, wait=True)
                continue
            if not isinstance(answer, Refused):
                return answer
            if settle:
                self.refused.append(answer)
                self.ref = None
                return None
            self._limited(answer, began)

    def poll(self) -> tuple[bool, Any]:
        """For a call whose ref is ready: (True, its answer), or (False, None) if it was sent again (for
        calls no rate limiter refuses: priority updates)."""
        try:
            return True, ray.get(self.ref, timeout=0)
        except RayTaskError as error:
            raise _unwrapped(error) from error
        except RayActorError as error:
            self._again(error, wait=False)
            return False, None


def call_shard(actor: Any, method: str, *args: Any, timeout: float = 60.0, rate_limit: str = "block",
               **kwargs: Any) -> Any:
    """``ray.get(actor.<method>.remote(*args, **kwargs))``, sent again if the actor dies and Ray restarts it
    (e.g. an env actor's ``call_shard(shard, "add_episode", episode)``); ``ShardUnavailableError`` after
    ``timeout`` seconds. A call the shard's rate limiter refuses waits for room (``rate_limit="block"``,
    ``RateLimitedError`` after ``timeout``) or raises ``RateLimitedError`` at once (``"raise"``)."""
    return ShardCall(actor, method, *args, timeout=timeout, rate_limit=rate_limit, **kwargs).result()
