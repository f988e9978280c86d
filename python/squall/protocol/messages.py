"""Every message of squall's protocol, declared once (docs/protocol.md#messages).

A message is a ``msgspec`` struct tagged by its ``op``: its fields are the header's,
with their types and defaults; ``PAYLOAD`` says what its payload holds. Each is
registered on the routes (who sends it to whom) it travels; a connection decodes the
frames it reads with the decoder of its route (:mod:`squall.protocol.comm`), which
validates every header in one C call and refuses an op the route does not carry. The
tables of docs/protocol.md are rendered from here (:mod:`squall.protocol.message_docs`;
tests/test_messages.py compares them).
Why msgspec: docs/protocol.md#messages.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Generic, TypeVar

import msgspec

#: Changes whenever a message changes in a way the other side cannot read (3: headers
#: are typed messages and a batch lists its payloads' spans apart; 4: ``data`` sends
#: values' buffers out of band), so that processes
#: of two versions refuse each other at the handshake instead of failing later.
PROTOCOL = "squall/6"


def note(text: str) -> msgspec.Meta:
    """A field's description, shown in docs/protocol.md."""
    return msgspec.Meta(description=text)


class Message(msgspec.Struct, tag_field="op", omit_defaults=True, kw_only=True):
    """A message header. ``PAYLOAD`` describes the payload ("" for none)."""

    PAYLOAD: ClassVar[str] = ""

    @classmethod
    def op(cls) -> str:
        return str(cls.__struct_config__.tag)


class Route(enum.Enum):
    """Who sends a message to whom; each connection reads one route."""

    HANDSHAKE = "Handshake"
    SCHEDULER_TO_WORKER = "Scheduler → worker"
    WORKER_TO_SCHEDULER = "Worker → scheduler"
    SCHEDULER_TO_NANNY = "Scheduler → nanny"
    NANNY_TO_SCHEDULER = "Nanny → scheduler"
    CLIENT_TO_SCHEDULER = "Client → scheduler"
    SCHEDULER_TO_CLIENT = "Scheduler → client"
    PEER_TO_WORKER = "Peer → worker (or nanny)"
    WORKER_TO_PEER = "Worker (or nanny) → peer"


_ROUTES: dict[Route, list[type[Message]]] = {r: [] for r in Route}
M = TypeVar("M", bound=type[Message])


def on(*routes: Route) -> Callable[[M], M]:
    """Declares the routes a message travels."""

    def register(cls: M) -> M:
        for r in routes:
            if any(m.op() == cls.op() for m in _ROUTES[r]):
                raise TypeError(f"two {cls.op()!r} messages on {r.value}")
            _ROUTES[r].append(cls)
        return cls

    return register


def messages(route: Route) -> list[type[Message]]:
    return list(_ROUTES[route])


S2W, W2S = Route.SCHEDULER_TO_WORKER, Route.WORKER_TO_SCHEDULER
S2N, N2S = Route.SCHEDULER_TO_NANNY, Route.NANNY_TO_SCHEDULER
C2S, S2C = Route.CLIENT_TO_SCHEDULER, Route.SCHEDULER_TO_CLIENT
P2W, W2P = Route.PEER_TO_WORKER, Route.WORKER_TO_PEER

KEYS = "`encode_keys(keys)`"
TASK_IDS = "packed u32 task ids"

# ----- framing ------------------------------------------------------------------------

T = TypeVar("T")


class Batch(Message, Generic[T], tag="batch", kw_only=True):
    """A frame's messages and their payloads' spans (docs/protocol.md#batched-streams)."""

    msgs: list[T]
    spans: Annotated[list[tuple[int, int]], note("[offset, length] of each payload")]
    parts: Annotated[int, note("the message came in parts of this total size")] = 0


class Part(Message, tag="part", kw_only=True):
    """A piece of a message larger than a frame (docs/protocol.md#messages-in-parts)."""

    total: int


# ----- handshake (docs/protocol.md#handshake) ------------------------------------------


@on(Route.HANDSHAKE)
class Hello(Message, tag="hello", kw_only=True):
    PAYLOAD = "—"
    protocol: str
    role: Annotated[str, note("worker, nanny, client or peer")]
    nonce: bytes = b""
    # A worker's.
    address: str | None = None
    nthreads: int = 0
    name: Any = None
    memory_limit: int = 0
    resources: dict[str, float] = {}
    nanny: Annotated[str | None, note("its nanny's address")] = None
    pid: int | None = None
    dashboard: Annotated[int | None, note("the port of its HTTP routes")] = None
    dashboard_scheme: str | None = None
    # A client's.
    client: Annotated[str | None, note("a client's name")] = None
    one_request: Annotated[bool, note("a connection made for one request")] = False
    worker: Annotated[str | None, note("a task's client: its worker's address")] = None


@on(Route.HANDSHAKE)
class Welcome(Message, tag="welcome", kw_only=True):
    protocol: str
    proof: Annotated[str | None, note("the listener's proof of the token")] = None


@on(Route.HANDSHAKE, S2W, S2N, S2C, W2P)
class Error(Message, tag="error", kw_only=True):
    """The listener refuses the connection (then closes it)."""

    message: str


@on(Route.HANDSHAKE)
class Challenge(Message, tag="challenge", kw_only=True):
    nonce: bytes


@on(Route.HANDSHAKE)
class Proof(Message, tag="proof", kw_only=True):
    proof: str


@on(S2W)
class WorkerRegistered(Message, tag="registered", kw_only=True):
    worker_id: int
    plugins: Annotated[dict[str, bytes], note("the worker plugins, pickled, by name")] = {}


@on(S2N)
class NannyRegistered(Message, tag="registered", kw_only=True):
    plugins: Annotated[dict[str, bytes], note("the nanny plugins, pickled, by name")] = {}


@on(S2C)
class ClientRegistered(Message, tag="registered", kw_only=True):
    client_id: int
    dashboard: Annotated[int | None, note("the port of its dashboard")] = None
    dashboard_scheme: str | None = None


# ----- scheduler → worker --------------------------------------------------------------


@on(S2W)
class Compute(Message, tag="compute", kw_only=True):
    PAYLOAD = "[compute layout](#compute)"
    addresses: Annotated[list[str], note("holder address table")]
    n: int


@on(S2W)
class FreeKeys(Message, tag="free-keys", kw_only=True):
    PAYLOAD = f"{TASK_IDS}: forget these tasks, drop their data"


@on(S2W)
class RemoveReplicas(Message, tag="remove-replicas", kw_only=True):
    PAYLOAD = f"{TASK_IDS}: this copy is not counted; drop it unless a local task needs it"


@on(S2W)
class StealRequest(Message, tag="steal-request", kw_only=True):
    task: int
    stimulus: int


@on(S2W)
class Scattered(Message, tag="scattered", kw_only=True):
    PAYLOAD = f"{KEYS}: keep the staged values as these tasks, or drop them"
    tasks: Annotated[list[int], note("task id, or -1 if refused")]


@on(S2W)
class RemoveWorker(Message, tag="remove-worker", kw_only=True):
    """A worker left: drop the cached connection to it."""

    worker_id: int
    address: str


@on(S2W)
class HeartbeatInterval(Message, tag="heartbeat-interval", kw_only=True):
    """The answer to every heartbeat: heartbeat at this period from now on."""

    interval: Annotated[float, note("seconds")]


@on(S2W, S2N, S2C)
class Restart(Message, tag="restart", kw_only=True):
    """To a worker without a nanny: close, the program re-executes itself; to a nanny:
    start a new worker process; to a client: every future is cancelled."""


@on(S2W)
class AcquireReplicas(Message, tag="acquire-replicas", kw_only=True):
    PAYLOAD = f"{KEYS}: fetch these results from `holder`, keep them, announce them"
    holder: Annotated[str, note("a retiring worker's address")]
    tasks: list[int]


@on(S2W, S2N)
class Close(Message, tag="close", kw_only=True):
    """Close for good (a nanny: and start no other worker)."""


# ----- worker → scheduler --------------------------------------------------------------


@on(W2S)
class Finished(Message, tag="finished", kw_only=True):
    PAYLOAD = "[finished layout](#finished)"
    n: int


class ErrorReport(Message, kw_only=True):
    """How an exception travels: its texts here, pickled exception (``n_exception``
    bytes) then pickled traceback in the payload (squall.protocol.remote_errors)."""

    exception_text: str = ""
    traceback_text: str = ""
    n_exception: int = 0


@on(W2S)
class Erred(ErrorReport, tag="erred", kw_only=True):
    PAYLOAD = "pickled exception (`n_exception` bytes), then pickled traceback"
    task: int
    run_id: int


class Memory(msgspec.Struct):
    process: Annotated[int, note("RSS")]
    managed: Annotated[int, note("bytes of results in memory")]
    spilled_memory: int
    spilled_disk: int
    spilled_count: int


@on(W2S)
class Heartbeat(Message, tag="heartbeat", kw_only=True):
    PAYLOAD = f"{KEYS} of the `stream` tasks, in order"
    executing: Annotated[list[tuple[int, float]], note("[[task, seconds running]]")] = []
    bandwidth: Annotated[float | None, note("bytes/s")] = None
    memory: Memory | None = None
    load: Annotated[dict[str, float] | None, note("docs/dashboard.md#worker-load")] = None
    stream: Annotated[
        list[tuple[float, float, int, bool, int, str]],
        note("[[start, stop, thread, ok, nbytes, typename]] sampled since the last"),
    ] = []
    stream_tasks: Annotated[int, note("how many tasks ran since the last")] = 0


@on(W2S)
class StealResponse(Message, tag="steal-response", kw_only=True):
    task: int
    state: Annotated[str | None, note("the worker's state name for the task")]
    stimulus: int


@on(W2S)
class LongRunning(Message, tag="long-running", kw_only=True):
    task: int
    run_id: int
    duration: Annotated[float, note("compute seconds so far")]


@on(W2S)
class Reschedule(Message, tag="reschedule", kw_only=True):
    task: int


@on(W2S)
class ReleaseWorkerData(Message, tag="release-worker-data", kw_only=True):
    task: int


@on(W2S)
class AddReplicas(Message, tag="add-replicas", kw_only=True):
    PAYLOAD = f"{KEYS}: fetched copies this worker now holds"


@on(W2S)
class DropReplicas(Message, tag="drop-replicas", kw_only=True):
    PAYLOAD = f"{KEYS}: fetched copies it no longer holds"


@on(W2S)
class Retire(Message, tag="retire", kw_only=True):
    """Retire me gracefully, then close me, or with ``restart`` replace me."""

    restart: bool = False


@on(W2S)
class HeldKeys(Message, tag="held-keys", kw_only=True):
    PAYLOAD = f"{KEYS}: results kept from the previous connection (answered with `scattered`)"


@on(W2S)
class WorkerStatusChange(Message, tag="worker-status-change", kw_only=True):
    status: Annotated[str, note('"paused" or "running"')]


# ----- nanny → scheduler ---------------------------------------------------------------


@on(N2S)
class WorkerDied(Message, tag="worker-died", kw_only=True):
    """Its worker's process ended, for any reason."""

    pid: int
    exit_code: Annotated[int, note("0: left cleanly; negative: killed by that signal")]
    executing: Annotated[list[int] | None, note("task ids it was running; null: unknown")]


@on(N2S, C2S, S2C)
class HeartbeatClient(Message, tag="heartbeat-client", kw_only=True):
    """A keep-alive; the scheduler answers a client's."""


# ----- client → scheduler, and the answers ---------------------------------------------


class Request(Message, kw_only=True):
    """A request a client waits for: the answer carries its ``id``."""

    id: int | None = None


class Reply(Request):
    pass


@on(C2S)
class UpdateGraph(Request, tag="update-graph", kw_only=True):
    PAYLOAD = "[update-graph layout](#update-graph)"
    n: int
    keys_bytes: int
    wanted: Annotated[list[int] | None, note("task indices; null: all")] = None
    order: Annotated[str, note('"compute", "zero" or "sequential"')] = "compute"
    priority: int = 0
    fifo_timeout: float = 0.0
    retries: int | None = None
    workers: list[str] | None = None
    resources: list[tuple[str, float]] | None = None
    allow_other_workers: bool = False
    task_options: Annotated[
        list[tuple[dict[str, Any], list[int]]] | None, note("[[options, task indices]]")
    ] = None
    data_producers: Annotated[list[int] | None, note("task indices")] = None


@on(S2C)
class GraphAccepted(Reply, tag="graph-accepted", kw_only=True):
    pass


@on(S2C)
class RequestFailed(Reply, tag="request-failed", kw_only=True):
    error: str


@on(C2S)
class ReleaseKeys(Message, tag="release-keys", kw_only=True):
    PAYLOAD = KEYS


@on(C2S)
class Cancel(Message, tag="cancel", kw_only=True):
    PAYLOAD = KEYS
    force: bool = False


@on(C2S)
class Retry(Message, tag="retry", kw_only=True):
    PAYLOAD = KEYS


@on(C2S)
class FireAndForget(Message, tag="fire-and-forget", kw_only=True):
    PAYLOAD = KEYS


@on(C2S)
class WhoHas(Request, tag="who-has", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class WhoHasReply(Reply, tag="who-has", kw_only=True):
    PAYLOAD = "[who-has layout](#who-has)"
    addresses: list[str]


@on(C2S)
class Scatter(Request, tag="scatter", kw_only=True):
    PAYLOAD = KEYS
    holders: Annotated[list[list[str]], note("addresses per key")]
    nbytes: Annotated[list[int], note("per key")]
    error: Annotated[str | None, note("the client failed to place some: refuse all")] = None


@on(S2C)
class ScatterDone(Reply, tag="scattered", kw_only=True):
    pass


@on(C2S)
class SchedulerInfo(Request, tag="scheduler-info", kw_only=True):
    pass


@on(S2C)
class SchedulerInfoReply(Reply, tag="scheduler-info", kw_only=True):
    """docs/protocol.md#scheduler-info lists a worker's fields."""

    scheduler_id: str
    address: str
    started: float
    services: dict[str, int]
    dashboard_scheme: str | None
    total_threads: int
    n_tasks: int
    total_memory: int
    workers: list[dict[str, Any]]


@on(C2S)
class WorkerKeys(Request, tag="worker-keys", kw_only=True):
    which: Annotated[str, note('"has_what" or "processing"')]
    workers: Annotated[list[str] | None, note("addresses; null: all")] = None


@on(S2C)
class WorkerKeysReply(Reply, tag="worker-keys", kw_only=True):
    PAYLOAD = f"{KEYS} of every worker's keys in turn"
    workers: Annotated[list[tuple[str, int]], note("[[address, count]]")]
    nbytes: Annotated[list[int], note("per key, in order")]


@on(C2S)
class Story(Request, tag="story", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class StoryReply(Reply, tag="story", kw_only=True):
    stories: Annotated[
        list[list[tuple[str, str, int, float]]], note("per key: [[start, finish, stimulus, time]]")
    ]


@on(C2S)
class TaskStream(Request, tag="task-stream", kw_only=True):
    cursor: Annotated[int | None, note("records added after it")] = None
    limit: Annotated[int | None, note("at most the newest this many")] = None
    start: Annotated[float | str | None, note("epoch seconds or a duration before now")] = None
    stop: float | str | None = None
    count: int | None = None
    flush: Annotated[bool, note("first wait for a heartbeat from each worker")] = False


@on(S2C)
class TaskStreamReply(Reply, tag="task-stream", kw_only=True):
    PAYLOAD = f"{KEYS} of the records' keys"
    cursor: Annotated[int, note("past the newest record")]
    tasks: Annotated[int, note("how many tasks the workers ever said they ran")]
    workers: Annotated[list[str], note("addresses")]
    records: Annotated[
        list[tuple[int, int, bool, float, float, int, str]],
        note("[[worker index, thread, ok, start, stop, nbytes, typename]]"),
    ]
    sampled: Annotated[float, note("fraction of the last 10 s's tasks with a record")]
    flushed: Annotated[bool, note("false if a worker's heartbeat did not come in time")]


@on(C2S)
class Progress(Request, tag="progress", kw_only=True):
    PAYLOAD = f"{KEYS} when starting"
    watch: Annotated[int | None, note("null: start watching the payload's keys")] = None
    complete: Annotated[bool, note("count dependencies already in memory")] = False
    stop: Annotated[bool, note("drop the watch")] = False


@on(S2C)
class ProgressReply(Reply, tag="progress", kw_only=True):
    watch: int
    counts: Annotated[list[tuple[str, int, int, int]], note("[[prefix, tasks, done, erred]]")] = []
    remaining: Annotated[int, note("tasks neither in memory nor erred")] = 0
    cancelled: Annotated[int, note("keys asked for that were released")] = 0


@on(C2S)
class GetLogs(Request, tag="get-logs", kw_only=True):
    which: Annotated[str, note('"scheduler" or "workers"')]
    n: Annotated[int | None, note("newest lines; null: all kept")] = None
    workers: Annotated[list[str] | None, note("addresses; null: all")] = None
    nanny: Annotated[bool, note("their nannies' instead")] = False


@on(S2C)
class GetLogsReply(Reply, tag="get-logs", kw_only=True):
    logs: Annotated[list[tuple[str, str]], note("[[level, line]] newest first")] = []
    workers: Annotated[dict[str, list[tuple[str, str]]], note("{address: logs}")] = {}
    errors: Annotated[dict[str, str], note("{address: why it did not answer}")] = {}


@on(C2S)
class Versions(Request, tag="versions", kw_only=True):
    packages: Annotated[list[str], note("more package names")] = []


@on(S2C)
class VersionsReply(Reply, tag="versions", kw_only=True):
    scheduler: dict[str, Any]
    workers: dict[str, Any]
    errors: dict[str, str]


@on(C2S)
class RestartCluster(Request, tag="restart", kw_only=True):
    timeout: float = 120.0
    wait_for_workers: bool = True


@on(S2C)
class Restarted(Reply, tag="restarted", kw_only=True):
    error: Annotated[str | None, note("why it timed out")] = None


@on(C2S)
class RetireWorkers(Request, tag="retire-workers", kw_only=True):
    workers: Annotated[list[str] | None, note("addresses or names; null: the scheduler's choice")]
    n: Annotated[int | None, note("with null workers: how many")] = None
    close_workers: bool = False
    remove: bool = True


@on(S2C)
class RetireWorkersReply(Reply, tag="retire-workers", kw_only=True):
    retired: Annotated[dict[str, dict[str, Any]], note("{address: worker info}")]
    kept: Annotated[dict[str, str], note("{address: why}")]


@on(C2S)
class RestartWorkers(Request, tag="restart-workers", kw_only=True):
    workers: Annotated[list[str], note("addresses or names")]
    timeout: float


@on(S2C)
class RestartWorkersReply(Reply, tag="restart-workers", kw_only=True):
    results: Annotated[dict[str, str], note('{address: "OK" or "timed out"}')]


@on(C2S)
class WaitForWorkers(Request, tag="wait-for-workers", kw_only=True):
    n_workers: int
    timeout: Annotated[float | None, note("seconds; null: while connected")] = None


@on(S2C)
class WaitForWorkersReply(Reply, tag="wait-for-workers", kw_only=True):
    n: Annotated[int, note("workers running")]
    error: Annotated[str | None, note("how many arrived in time")] = None


@on(C2S)
class AdaptiveTarget(Request, tag="adaptive-target", kw_only=True):
    target_duration: Annotated[float | None, note("null: squall.adaptive.target-duration")] = None
    minimum: int = 0
    maximum: int | None = None


@on(S2C)
class AdaptiveTargetReply(Reply, tag="adaptive-target", kw_only=True):
    target: int
    to_close: Annotated[list[str], note("addresses to close first")]


@on(C2S)
class Shutdown(Request, tag="shutdown", kw_only=True):
    pass


@on(S2C)
class ShutdownReply(Reply, tag="shutdown", kw_only=True):
    pass


# ----- scheduler → client notices -----------------------------------------------------


@on(S2C)
class KeyInMemory(Message, tag="key-in-memory", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class LostData(Message, tag="lost-data", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class TaskRetried(Message, tag="task-retried", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class CancelledKeys(Message, tag="cancelled-keys", kw_only=True):
    PAYLOAD = KEYS


@on(S2C)
class TaskErred(ErrorReport, tag="task-erred", kw_only=True):
    PAYLOAD = "the key (`n_key` bytes), pickled exception (`n_exception` bytes), traceback"
    error_kind: str = "Remote"
    n_key: int = 0


# ----- peer → worker (or nanny), and the answers ---------------------------------------


@on(P2W)
class GetData(Request, tag="get-data", kw_only=True):
    PAYLOAD = KEYS
    n: int = 0


@on(W2P)
class Data(Reply, tag="data", kw_only=True):
    PAYLOAD = (
        "per value in order, its pickle then its out-of-band buffers; if `whole`, one "
        "pickle of the list of all the values, in key order"
    )
    sizes: Annotated[
        list[int],
        note("per key, of its pickle; -1: not held here; -2: cannot be pickled; empty if `whole`"),
    ]
    whole: Annotated[
        bool, note("every key held, each value of a plain type, all pickled together")
    ] = False
    buffers: Annotated[
        dict[int, list[int]], note("{index: sizes of its out-of-band buffers}")
    ] = {}
    failed: Annotated[
        dict[int, tuple[str, bytes]], note("{index: [repr, pickled exception]}")
    ] = {}


@on(P2W)
class UpdateData(Request, tag="update-data", kw_only=True):
    PAYLOAD = f"{KEYS} (`keys_bytes` long), then the pickled values"
    keys_bytes: int
    sizes: list[int]


@on(W2P)
class DataUpdated(Reply, tag="data-updated", kw_only=True):
    """Staged until ``scattered``."""

    nbytes: Annotated[list[int], note("sizes measured there")] = []
    error: str | None = None


@on(P2W)
class Run(Request, tag="run", kw_only=True):
    PAYLOAD = "`cloudpickle((func, args, kwargs))`"
    wait: bool = True


@on(W2P)
class RunResult(ErrorReport, tag="run-result", kw_only=True):
    PAYLOAD = "the pickled result, or the error report's payload"
    id: int | None = None
    status: Annotated[str, note('"OK" or "error"')]


class Malformed(msgspec.Struct):
    """Not a wire message: what a connection's reader hands on in place of a message
    whose header did not validate, so that its handler answers or closes."""

    op: str | None
    id: int | None
    error: str


# ----- datasets and events (docs/protocol.md#datasets-and-events) ----------------------


@on(C2S)
class PublishDatasets(Request, tag="publish-datasets", kw_only=True):
    PAYLOAD = (
        f"{KEYS} of the names (`names_bytes` long), {KEYS} of the futures' keys "
        "(`keys_bytes` long), then each pickled value"
    )
    names_bytes: int
    keys_bytes: int
    counts: Annotated[list[int], note("futures' keys per dataset, in order")]
    sizes: Annotated[list[int], note("bytes of each pickled value")]
    override: Annotated[bool, note("replace datasets of these names")] = False


@on(S2C)
class PublishDatasetsReply(Reply, tag="publish-datasets", kw_only=True):
    error: Annotated[str | None, note("a name already published: nothing was")] = None


@on(C2S)
class GetDatasets(Request, tag="get-datasets", kw_only=True):
    PAYLOAD = f"{KEYS} of the names"


@on(S2C)
class GetDatasetsReply(Reply, tag="get-datasets", kw_only=True):
    """The answer to `get-datasets`: it hands the values' futures over to the client."""

    PAYLOAD = "each pickled value, concatenated, then `encode_keys` of their futures' keys"
    sizes: Annotated[list[int], note("per name; -1: none published")]
    n_keys: Annotated[list[int], note("futures' keys of each value")] = []


@on(C2S)
class UnpublishDatasets(Request, tag="unpublish-datasets", kw_only=True):
    PAYLOAD = f"{KEYS} of the names (unknown ones are ignored)"


@on(S2C)
class UnpublishDatasetsReply(Reply, tag="unpublish-datasets", kw_only=True):
    pass


@on(C2S)
class ListDatasets(Request, tag="list-datasets", kw_only=True):
    pass


@on(S2C)
class ListDatasetsReply(Reply, tag="list-datasets", kw_only=True):
    PAYLOAD = f"{KEYS} of the names, sorted by their text"


@on(C2S, W2S)
class LogEvent(Message, tag="log-event", kw_only=True):
    topics: list[str]
    msg: Annotated[Any, note("any msgpack value")]


@on(C2S)
class GetEvents(Request, tag="get-events", kw_only=True):
    topic: Annotated[str | None, note("null: every topic with events")] = None


@on(S2C)
class GetEventsReply(Reply, tag="get-events", kw_only=True):
    events: Annotated[dict[str, list[tuple[float, Any]]], note("{topic: [[time, msg]]}")]


@on(C2S)
class SubscribeTopic(Message, tag="subscribe-topic", kw_only=True):
    topic: str


@on(C2S)
class UnsubscribeTopic(Message, tag="unsubscribe-topic", kw_only=True):
    topic: str


@on(S2C)
class Event(Message, tag="event", kw_only=True):
    """An event logged under a topic the client subscribed to."""

    topic: str
    time: Annotated[float, note("epoch seconds, the scheduler's clock")]
    msg: Any


# ----- coordination primitives (docs/primitives.md) -----------------------------------

VALUE = "the pickled value (`n_data` bytes), then `encode_keys` of the futures' keys in it"
SECONDS = note("seconds; null: wait as long as it takes")


@on(C2S)
class SemaphoreAcquire(Request, tag="semaphore-acquire", kw_only=True):
    name: str
    max_leases: int
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class SemaphoreRelease(Request, tag="semaphore-release", kw_only=True):
    name: str
    lease: Annotated[int, note("the id of the acquire that took it")]


@on(C2S)
class SemaphoreValue(Request, tag="semaphore-value", kw_only=True):
    name: str


@on(C2S)
class SemaphoreClose(Request, tag="semaphore-close", kw_only=True):
    name: str


@on(C2S)
class MultiLockAcquire(Request, tag="multi-lock-acquire", kw_only=True):
    names: list[str]
    num_locks: Annotated[int | None, note("null: all of them")] = None
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class MultiLockRelease(Request, tag="multi-lock-release", kw_only=True):
    lease: Annotated[int, note("the id of the acquire that took them")]


@on(C2S)
class EventWait(Request, tag="event-wait", kw_only=True):
    name: str
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class EventSet(Request, tag="event-set", kw_only=True):
    name: str


@on(C2S)
class EventClear(Request, tag="event-clear", kw_only=True):
    name: str


@on(C2S)
class EventIsSet(Request, tag="event-is-set", kw_only=True):
    name: str


@on(C2S)
class VariableSet(Request, tag="variable-set", kw_only=True):
    PAYLOAD = VALUE
    name: str
    n_data: int


@on(C2S)
class VariableGet(Request, tag="variable-get", kw_only=True):
    name: str
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class VariableDelete(Request, tag="variable-delete", kw_only=True):
    name: str


@on(C2S)
class QueuePut(Request, tag="queue-put", kw_only=True):
    PAYLOAD = VALUE
    name: str
    maxsize: Annotated[int, note("if the queue is new; 0: unbounded")] = 0
    n_data: int
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class QueueGet(Request, tag="queue-get", kw_only=True):
    name: str
    maxsize: int = 0
    batch: Annotated[bool | int, note("false: one; true: all queued; n: n of them")] = False
    timeout: Annotated[float | None, SECONDS] = None


@on(C2S)
class QueueSize(Request, tag="queue-qsize", kw_only=True):
    name: str
    maxsize: int = 0


@on(C2S)
class QueueClose(Request, tag="queue-close", kw_only=True):
    name: str


@on(S2C)
class CoordReply(Reply, tag="coord", kw_only=True):
    """The answer to a primitive's request (`semaphore-acquire` … `queue-close`)."""

    PAYLOAD = "the values' pickles (`sizes`), then `encode_keys` of their futures' keys"
    ok: Annotated[bool, note("false: timed out")] = True
    count: Annotated[int, note("leases held, values queued, an event's flag")] = 0
    sizes: Annotated[list[int], note("bytes of each value")] = []
    n_keys: Annotated[list[int], note("futures' keys of each value")] = []


# ----- actors (docs/actors.md) ----------------------------------------------------------


@on(P2W)
class ActorCall(Request, tag="actor-call", kw_only=True):
    """Call a method of an actor this worker holds; answered out of turn, when done
    (docs/protocol.md#actors)."""

    PAYLOAD = "`cloudpickle((args, kwargs))`"
    key: Annotated[bytes, note("the actor's key, `encode_keys([key])`")]
    method: str


@on(P2W)
class ActorAttribute(Request, tag="actor-attribute", kw_only=True):
    """Read an attribute of an actor this worker holds."""

    key: Annotated[bytes, note("the actor's key, `encode_keys([key])`")]
    attribute: str


@on(W2P)
class ActorAnswer(ErrorReport, tag="actor-answer", kw_only=True):
    PAYLOAD = "the pickled value, or the error report's payload"
    id: int | None = None
    status: Annotated[str, note('"OK", "error" (the method raised) or "missing" (no such actor)')]


# ----- admin calls (docs/protocol.md#admin-calls) ---------------------------------------

# `run_on_scheduler` is `run` sent to the scheduler: the same request and answer.
on(C2S)(Run)
on(S2C)(RunResult)


@on(C2S)
class GetMetadata(Request, tag="get-metadata", kw_only=True):
    PAYLOAD = "msgpack of the path of keys"


@on(C2S)
class SetMetadata(Request, tag="set-metadata", kw_only=True):
    PAYLOAD = "msgpack of `[path of keys, value]`"


@on(S2C)
class Metadata(Reply, tag="metadata", kw_only=True):
    """The answer to `get-metadata` and `set-metadata`."""

    PAYLOAD = "msgpack of the value got, or of the first key of the path not found"
    found: Annotated[bool, note("false: a key of the path is missing")] = True


# ----- replicas (docs/protocol.md#replicas) ---------------------------------------------


@on(C2S)
class Replicate(Request, tag="replicate", kw_only=True):
    """`Client.replicate`: answered once the copies are in place, or at the wait's end."""

    PAYLOAD = "`encode_keys` of the keys"
    n: Annotated[int | None, note("copies wanted among the workers; null: all of them")] = None
    workers: Annotated[list[str] | None, note("addresses or names; null: all running")] = None
    branching_factor: Annotated[int, note("copies each holder serves at a time")] = 2


@on(C2S)
class Rebalance(Request, tag="rebalance", kw_only=True):
    """`Client.rebalance`: answered once the moves are done, or at the wait's end."""

    PAYLOAD = "`encode_keys` of the keys (with `some_keys`)"
    some_keys: Annotated[bool, note("false: every result may move")] = False
    workers: Annotated[list[str] | None, note("addresses; null: all")] = None


@on(C2S)
class Amm(Request, tag="amm", kw_only=True):
    """`Client.amm`: start, stop or ask about the periodic pass, or run it once."""

    method: Annotated[str, note('"start", "stop", "running" or "run_once"')]


@on(S2C)
class ReplicasReply(Reply, tag="replicas", kw_only=True):
    """The answer to `replicate`, `rebalance` and `amm`."""

    error: Annotated[str | None, note("why it could not be done")] = None
    error_type: Annotated[str, note('"ValueError", "KeyError" or "TimeoutError"')] = "ValueError"
    done: Annotated[int, note("copies made, moves done or replicas dropped")] = 0
    running: Annotated[bool, note("whether the periodic pass is started")] = False


# ----- scheduler plugins (docs/protocol.md#scheduler-plugins) ---------------------------


@on(C2S)
class RegisterSchedulerPlugin(Request, tag="register-scheduler-plugin", kw_only=True):
    """Unpickle a plugin on the scheduler, start it and keep it under `name`."""

    PAYLOAD = "`cloudpickle(plugin)`"
    name: str
    idempotent: Annotated[bool, note("true: a plugin already under `name` is kept")] = False


@on(C2S)
class UnregisterSchedulerPlugin(Request, tag="unregister-scheduler-plugin", kw_only=True):
    """Remove the plugin under `name`, then close it."""

    name: str


@on(S2C)
class SchedulerPluginResult(ErrorReport, tag="scheduler-plugin-result", kw_only=True):
    """The answer to `register-scheduler-plugin` and `unregister-scheduler-plugin`."""

    PAYLOAD = "empty, or the error report's payload"
    id: int | None = None
    status: Annotated[str, note('"OK" or "error"')]


# ----- worker and nanny plugins (docs/protocol.md#worker-and-nanny-plugins) ----------

PLUGIN = "the pickled plugin (never unpickled by the scheduler)"


@on(C2S)
class RegisterWorkerPlugin(Request, tag="register-worker-plugin", kw_only=True):
    PAYLOAD = PLUGIN
    name: str
    nanny: Annotated[bool, note("a nanny plugin: for the nannies")] = False
    idempotent: Annotated[bool, note("keep the plugin already registered under the name")] = False


@on(C2S)
class UnregisterWorkerPlugin(Request, tag="unregister-worker-plugin", kw_only=True):
    name: str
    nanny: bool = False


@on(S2C)
class PluginReply(ErrorReport, tag="plugin-reply", kw_only=True):
    """The answer to `register-worker-plugin` and `unregister-worker-plugin`; the error
    report is the first worker's (or nanny's) that failed."""

    PAYLOAD = "the error report's payload, if any"
    id: int | None = None
    statuses: Annotated[dict[str, str], note('{address: "OK" or "error"}')] = {}
    error: Annotated[str | None, note("the request itself failed (an unknown name)")] = None


@on(P2W)
class PluginAdd(Request, tag="plugin-add", kw_only=True):
    """Set up a plugin (replacing one of the same name), on a worker or a nanny."""

    PAYLOAD = PLUGIN
    name: str


@on(P2W)
class PluginRemove(Request, tag="plugin-remove", kw_only=True):
    """Tear down and forget the plugin of this name, on a worker or a nanny."""

    name: str


@on(W2P)
class PluginResult(ErrorReport, tag="plugin-result", kw_only=True):
    PAYLOAD = "the error report's payload, if `status` is error"
    id: int | None = None
    status: Annotated[str, note('"OK" or "error"')]
