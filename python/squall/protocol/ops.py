"""The message ops, spelled once (docs/protocol.md#messages lists them).

Every Python side (scheduler, worker, client, comm) names messages by these constants;
tests/test_ops.py checks them against the messages ``docs/protocol.md`` documents and
the op names of the Rust core's commands (``squall._core.COMMAND_OPS``).
"""

from __future__ import annotations

from typing import Final

# Frames and the handshake (comm).
HELLO: Final = "hello"
WELCOME: Final = "welcome"
ERROR: Final = "error"
REGISTERED: Final = "registered"
CHALLENGE: Final = "challenge"  # token authentication (docs/security.md)
PROOF: Final = "proof"
BATCH: Final = "batch"
PART: Final = "part"

# Scheduler -> worker.
COMPUTE: Final = "compute"
FREE_KEYS: Final = "free-keys"
REMOVE_REPLICAS: Final = "remove-replicas"
STEAL_REQUEST: Final = "steal-request"
SCATTERED: Final = "scattered"
REMOVE_WORKER: Final = "remove-worker"
HEARTBEAT_INTERVAL: Final = "heartbeat-interval"
RESTART: Final = "restart"  # to workers and clients; also a client's request
ACQUIRE_REPLICAS: Final = "acquire-replicas"
CLOSE: Final = "close"  # to workers and nannies

# Worker -> scheduler.
FINISHED: Final = "finished"
ERRED: Final = "erred"
HEARTBEAT: Final = "heartbeat"
STEAL_RESPONSE: Final = "steal-response"
LONG_RUNNING: Final = "long-running"
RESCHEDULE: Final = "reschedule"
RELEASE_WORKER_DATA: Final = "release-worker-data"
ADD_REPLICAS: Final = "add-replicas"
DROP_REPLICAS: Final = "drop-replicas"
RETIRE: Final = "retire"
HELD_KEYS: Final = "held-keys"  # after re-registering; answered with ``scattered``
WORKER_STATUS_CHANGE: Final = "worker-status-change"

# Client -> scheduler, and the answers.
UPDATE_GRAPH: Final = "update-graph"
RELEASE_KEYS: Final = "release-keys"
CANCEL: Final = "cancel"
RETRY: Final = "retry"
WHO_HAS: Final = "who-has"  # the request and its answer
SCATTER: Final = "scatter"
FIRE_AND_FORGET: Final = "fire-and-forget"
SCHEDULER_INFO: Final = "scheduler-info"  # the request and its answer
WORKER_KEYS: Final = "worker-keys"  # the request and its answer (has_what, processing)
STORY: Final = "story"  # the request and its answer
TASK_STREAM: Final = "task-stream"  # the request and its answer
GRAPH_ACCEPTED: Final = "graph-accepted"
REQUEST_FAILED: Final = "request-failed"
RESTARTED: Final = "restarted"
# Cluster lifecycle (docs/runtime.md#cluster-lifecycle): each the request and its answer.
RETIRE_WORKERS: Final = "retire-workers"
RESTART_WORKERS: Final = "restart-workers"
WAIT_FOR_WORKERS: Final = "wait-for-workers"
ADAPTIVE_TARGET: Final = "adaptive-target"
SHUTDOWN: Final = "shutdown"
LIFECYCLE_REQUESTS: Final = frozenset(
    {RETIRE_WORKERS, RESTART_WORKERS, WAIT_FOR_WORKERS, ADAPTIVE_TARGET, SHUTDOWN}
)
HEARTBEAT_CLIENT: Final = "heartbeat-client"  # a keep-alive, and its answer
# Client diagnostics (docs/runtime.md#diagnostics): each the request and its answer.
PROGRESS: Final = "progress"
GET_LOGS: Final = "get-logs"
VERSIONS: Final = "versions"
DIAGNOSTIC_REQUESTS: Final = frozenset({PROGRESS, GET_LOGS, VERSIONS})

# Scheduler -> client.
KEY_IN_MEMORY: Final = "key-in-memory"
LOST_DATA: Final = "lost-data"
TASK_RETRIED: Final = "task-retried"
CANCELLED_KEYS: Final = "cancelled-keys"
TASK_ERRED: Final = "task-erred"

# Peer -> worker, and the answers.
GET_DATA: Final = "get-data"
DATA: Final = "data"
UPDATE_DATA: Final = "update-data"
DATA_UPDATED: Final = "data-updated"
RUN: Final = "run"
RUN_RESULT: Final = "run-result"

# Nanny -> scheduler (the scheduler sends a nanny ``restart``).
WORKER_DIED: Final = "worker-died"

# Core commands that are not messages of their own name: ``compute-task`` goes out in
# ``compute`` batches, and ``close-worker`` has the scheduler close that worker's
# connection. Every other command travels as the message of its own name
# (``Commands.counts``/``records`` use these names).
COMPUTE_TASK: Final = "compute-task"
CLOSE_WORKER: Final = "close-worker"
NOT_MESSAGES: Final = frozenset({COMPUTE_TASK, CLOSE_WORKER})
