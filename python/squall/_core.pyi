"""Type stubs for squall._core, the Rust scheduling core's Python face."""

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal, final

__version__: str
COMMAND_OPS: tuple[str, ...]
__all__ = [
    "COMMAND_OPS",
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "InternalError",
    "Scheduler",
    "SchedulerError",
    "StaleReportError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "WorkerCore",
    "__version__",
    "call_prefix",
    "check_config",
    "decode_compute",
    "decode_keys",
    "default_config",
    "encode_keys",
    "heap_bytes",
    "load_function",
    "microbench",
    "order_mapping",
    "simulate",
    "split_call",
]

_Key = Hashable
_Outcome = Literal["applied", "ignored"]
# A task's failure as the worker reports it: (repr, formatted traceback, pickled
# exception, pickled traceback).
_PackedError = tuple[str, str, bytes, bytes]

class SchedulerError(Exception): ...
class CycleError(SchedulerError): ...
class UnknownDependencyError(SchedulerError): ...
class DuplicateKeyError(SchedulerError): ...
class UnknownKeyError(SchedulerError): ...
class UnknownTaskError(SchedulerError): ...
class UnknownWorkerError(SchedulerError): ...
class StaleReportError(SchedulerError): ...
class InternalError(SchedulerError): ...

def check_config(config: dict[str, Any]) -> None: ...
def default_config() -> dict[str, Any]: ...
def order_mapping(
    dsk: dict[_Key, Any], dependencies: Mapping[_Key, Iterable[_Key]] | None = None
) -> dict[_Key, int]: ...
def simulate(
    *,
    workload_name: str | None = None,
    n: int = 1000,
    keys: list[_Key] | None = None,
    deps: list[list[int]] | None = None,
    durations: list[float] | None = None,
    nbytes: list[int] | None = None,
    workers: int = 4,
    threads: int = 2,
    config: dict[str, Any] | None = None,
    deaths: list[tuple[int, float]] | None = None,
    bandwidth: float = 100000000.0,
    latency: float = 0.001,
) -> dict[str, Any]: ...
def decode_compute(
    payload: bytes, addresses: list[str]
) -> list[
    tuple[
        int,
        int,
        _Key,
        tuple[int, float, int],
        bytes,
        bool,
        list[tuple[str, float]],
        list[tuple[_Key, int, list[str]]],
    ]
]: ...
def encode_keys(keys: Sequence[_Key]) -> bytes: ...
def decode_keys(payload: bytes) -> list[_Key]: ...
def heap_bytes() -> int: ...
def call_prefix(function: bytes) -> bytes: ...
def split_call(spec: bytes) -> tuple[bytes, bytes] | None: ...
def load_function(blob: bytes) -> Callable[..., Any]: ...
def microbench(name: str, n: int, *, workers: int = 16) -> float: ...

@final
class WorkerCore:
    def __new__(
        cls,
        address: str,
        nthreads: int,
        resources: list[tuple[str, float]],
        report_delay: float,
        run_spec: Callable[[bytes, dict[_Key, Any]], Any],
        fill_call: Callable[
            [tuple[Any, ...], dict[str, Any], dict[_Key, Any]],
            tuple[tuple[Any, ...], dict[str, Any]],
        ],
        pack_error: Callable[[BaseException], _PackedError],
        sizeof: Callable[[Any], int],
    ) -> WorkerCore: ...
    def set_address(self, address: str) -> None: ...
    def compute(self, payload: bytes, addresses: list[str]) -> int: ...
    def free(self, payload: bytes) -> None: ...
    def remove_replicas(self, payload: bytes) -> None: ...
    def steal(self, task: int) -> str | None: ...
    def run(self) -> int: ...
    def add_thread(self) -> None: ...
    def close(self) -> None: ...
    def take_reports(
        self,
    ) -> tuple[tuple[int, bytes] | None, list[tuple[int, int, _PackedError]], bytes, bytes]: ...
    def executing(self) -> list[tuple[int, float]]: ...
    @staticmethod
    def current_task() -> int | None: ...
    def elapsed(self, task: int) -> float | None: ...
    def secede(self, task: int) -> tuple[int | None, bool] | None: ...
    def rejoin(self, task: int) -> None: ...
    def take_fetches(
        self, connected: list[str]
    ) -> tuple[
        list[tuple[str, list[_Key], list[int]]], list[tuple[_Key, list[tuple[int, int]]]]
    ]: ...
    def fetched(self, holder: str, key_id: int, value: Any, nbytes: int) -> None: ...
    def not_fetched(self, holder: str, key_id: int) -> None: ...
    def fetch_failed(self, holder: str, key_id: int) -> list[tuple[int, int]]: ...
    def give_back(self, waiters: list[tuple[int, int]]) -> list[int]: ...
    def get_data(self, keys: bytes, missing: Any) -> list[Any]: ...
    def put_scattered(self, task: int, key: _Key, value: Any, nbytes: int) -> None: ...
    def data(self) -> dict[_Key, Any]: ...
    def nbytes(self) -> dict[_Key, int]: ...
    def tasks(self) -> dict[int, tuple[_Key, str]]: ...

@final
class Commands:
    def __len__(self) -> int: ...
    def counts(self) -> dict[str, int]: ...
    def records(self) -> list[tuple[str, int, int, int]]: ...
    def compute(self) -> tuple[bytes, bytes, bytes]: ...

@final
class Scheduler:
    def __new__(cls, config: dict[str, Any] | None = None) -> Scheduler: ...
    def client(self, name: str) -> int: ...
    def add_worker(
        self,
        address: str,
        nthreads: int,
        *,
        now: float,
        name: str | None = None,
        host: str | None = None,
        memory_limit: int = 0,
        resources: Sequence[tuple[str, float]] | None = None,
    ) -> int: ...
    def remove_worker(self, worker: int, *, now: float, expected: bool = False) -> None: ...
    def worker_status_change(self, worker: int, status: str, *, now: float) -> None: ...
    def heartbeat(
        self,
        worker: int,
        *,
        now: float,
        bandwidth: float | None = None,
        executing: Sequence[tuple[int, float]] | None = None,
    ) -> float: ...
    def submit(
        self,
        client: int,
        keys: Iterable[_Key],
        deps: Iterable[Iterable[int | _Key]] | None = None,
        *,
        now: float,
        specs: Iterable[bytes | None] | None = None,
        wanted: Sequence[int] | None = None,
        order: str = "compute",
        order_given: Sequence[int] | None = None,
        priority: int = 0,
        fifo_timeout: float = 0.0,
        retries: int | None = None,
        workers: Sequence[str] | None = None,
        hosts: Sequence[str] | None = None,
        resources: Sequence[tuple[str, float]] | None = None,
        allow_other_workers: bool = False,
        actor: bool = False,
        annotations: bytes | None = None,
        submitting_task: _Key | None = None,
    ) -> bytes: ...
    def submit_wire(
        self,
        client: int,
        payload: bytes,
        n: int,
        keys_bytes: int,
        *,
        now: float,
        wanted: Sequence[int] | None = None,
        order: str = "compute",
        priority: int = 0,
        fifo_timeout: float = 0.0,
        retries: int | None = None,
        workers: Sequence[str] | None = None,
        hosts: Sequence[str] | None = None,
        resources: Sequence[tuple[str, float]] | None = None,
        allow_other_workers: bool = False,
        task_options: Sequence[tuple[dict[str, Any], Sequence[int]]] | None = None,
        data_producers: Sequence[int] | None = None,
    ) -> bytes: ...
    def submit_csr(
        self,
        client: int,
        keys: list[_Key],
        dep_offsets: bytes,
        dep_indices: bytes,
        *,
        now: float,
        order: str = "compute",
        priority: int = 0,
        fifo_timeout: float = 0.0,
        wanted: Sequence[int] | None = None,
    ) -> bytes: ...
    def submit_map(
        self,
        client: int,
        prefix: str,
        n: int,
        *,
        now: float,
        start: int = 0,
        spec: bytes | None = None,
        priority: int = 0,
        fifo_timeout: float = 0.1,
    ) -> bytes: ...
    def task_finished(
        self,
        worker: int,
        task: int,
        run_id: int,
        nbytes: int,
        *,
        now: float,
        start: float = 0.0,
        stop: float = 0.0,
        typename: str | None = None,
    ) -> _Outcome: ...
    def finished_wire(self, worker: int, payload: bytes, n: int, *, now: float) -> list[int]: ...
    def tasks_finished(
        self,
        workers: int | bytes,
        tasks: bytes,
        run_ids: bytes,
        nbytes: bytes,
        durations: bytes | None = None,
        *,
        now: float,
    ) -> list[int]: ...
    def task_erred(
        self,
        worker: int,
        task: int,
        run_id: int,
        *,
        now: float,
        exception: bytes | None = None,
        traceback: bytes | None = None,
        exception_text: str | None = None,
        traceback_text: str | None = None,
    ) -> _Outcome: ...
    def long_running(
        self, worker: int, task: int, run_id: int, compute_duration: float, *, now: float
    ) -> _Outcome: ...
    def reschedule(self, worker: int, task: int, *, now: float) -> _Outcome: ...
    def release_worker_data(self, worker: int, task: int, *, now: float) -> _Outcome: ...
    def add_replicas(self, worker: int, keys: bytes, *, now: float) -> None: ...
    def drop_replicas(self, worker: int, keys: bytes, *, now: float) -> None: ...
    def steal_response(
        self, worker: int, task: int, state: str | None, stimulus: int, *, now: float
    ) -> bool: ...
    def client_releases_keys(self, client: int, keys: Sequence[_Key], *, now: float) -> None: ...
    def client_releases_tasks(self, client: int, tasks: bytes, *, now: float) -> None: ...
    def cancel(
        self, client: int, keys: Sequence[_Key], *, now: float, force: bool = False
    ) -> None: ...
    def retry(self, keys: Sequence[_Key], *, now: float) -> None: ...
    def remove_client(self, client: int, *, now: float) -> None: ...
    def fire_and_forget(self, keys: Sequence[_Key], *, now: float) -> None: ...
    def release_fire_and_forget_keys(self, *, now: float) -> None: ...
    def scatter(
        self,
        client: int,
        items: Sequence[tuple[_Key, int]],
        workers: Sequence[int],
        *,
        now: float,
    ) -> list[int]: ...
    def tick(self, *, now: float) -> None: ...
    def take_commands(self) -> Commands: ...
    def encode_compute(self, cmds: Commands) -> dict[int, tuple[list[str], bytes, int]]: ...
    def encode_notices(
        self, cmds: Commands
    ) -> tuple[list[tuple[int, str, bytes]], list[tuple[int, str, bytes]]]: ...
    def lookup(self, key: _Key) -> int | None: ...
    def key_of(self, task: int) -> _Key: ...
    def who_has_wire(self, keys: bytes) -> tuple[list[str], bytes]: ...
    def state(self, key: _Key) -> str: ...
    def task_info(self, task: int) -> dict[str, Any]: ...
    def worker_info(self, worker: int) -> dict[str, Any]: ...
    def workers(self) -> list[tuple[str, int]]: ...
    def story(self, key: _Key) -> list[tuple[str, str, int, float]]: ...
    def take_redefined(self) -> list[_Key]: ...
    def validate(self) -> None: ...
    @property
    def n_tasks(self) -> int: ...
    @property
    def n_queued(self) -> int: ...
    @property
    def total_nthreads(self) -> int: ...
    @property
    def total_memory(self) -> int: ...
    def state_counts(self) -> dict[str, int]: ...
