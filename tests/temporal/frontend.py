"""A Temporal frontend at the SDK's RPC boundary, for the fault tests.

:class:`Frontend` is a ``temporalio.service.ServiceClient`` whose requests are
answered from a plan instead of a server: a response, an exception raised
(an ``RPCError`` with the status a lost connection gives, the core's
``RuntimeError``, ...), or :data:`SILENT` (no answer, ever). Everything above
it is the real SDK (its retries of an Update until accepted, its conversion of
statuses into its own errors) and the real turnfsm, so a test sees exactly what
a TemporalEngine sees from a server that fails that way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from google.protobuf.any_pb2 import Any as AnyDetail
from temporalio.api.common.v1 import GrpcStatus, WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage as Stage
from temporalio.api.errordetails.v1 import MultiOperationExecutionFailure, WorkflowNotReadyFailure
from temporalio.api.failure.v1 import (
    ApplicationFailureInfo,
    Failure,
    MultiOperationExecutionAborted,
)
from temporalio.api.update.v1 import Outcome, UpdateRef
from temporalio.api.workflowservice.v1 import (
    ExecuteMultiOperationResponse,
    PollWorkflowExecutionUpdateResponse,
    SignalWorkflowExecutionResponse,
    StartWorkflowExecutionResponse,
    UpdateWorkflowExecutionResponse,
)
from temporalio.bridge.proto.health.v1 import HealthCheckResponse
from temporalio.client import Client
from temporalio.service import ConnectConfig, RPCError, RPCStatusCode, ServiceClient

__all__ = [
    "ACCEPTED",
    "FAILED",
    "HEALTHY",
    "SIGNALLED",
    "SILENT",
    "Frontend",
    "client_of",
    "not_ready",
    "rpc_error",
]

SILENT = object()
"""A request the frontend never answers."""

HEALTHY = HealthCheckResponse(status=HealthCheckResponse.ServingStatus.SERVING)


def rpc_error(status: RPCStatusCode, message: str = "") -> RPCError:
    return RPCError(message or status.name.lower().replace("_", " "), status, b"")


def not_ready() -> RPCError:
    """What the server answers an update-with-start on a workflow whose last
    workflow task failed: the Update's operation ``FAILED_PRECONDITION`` with a
    ``WorkflowNotReadyFailure``, the start's aborted."""
    said = "Unable to perform workflow execution update due to Workflow Task in failed state."
    reason = AnyDetail()
    reason.Pack(WorkflowNotReadyFailure())
    aborted = AnyDetail()
    aborted.Pack(MultiOperationExecutionAborted())
    multi = MultiOperationExecutionFailure(
        statuses=[
            MultiOperationExecutionFailure.OperationStatus(
                code=10, message="Operation was aborted.", details=[aborted]
            ),
            MultiOperationExecutionFailure.OperationStatus(code=9, message=said, details=[reason]),
        ]
    )
    detail = AnyDetail()
    detail.Pack(multi)
    status = GrpcStatus(
        code=9, message="Update-with-Start could not be executed.", details=[detail]
    )
    return RPCError(status.message, RPCStatusCode.FAILED_PRECONDITION, status.SerializeToString())


def ACCEPTED(req: Any) -> ExecuteMultiOperationResponse:
    """The answer to an update-with-start: the workflow runs, the Update is accepted."""
    update = req.operations[1].update_workflow
    ref = UpdateRef(
        workflow_execution=WorkflowExecution(
            workflow_id=update.workflow_execution.workflow_id, run_id="run-1"
        ),
        update_id=update.request.meta.update_id,
    )
    return ExecuteMultiOperationResponse(
        responses=[
            ExecuteMultiOperationResponse.Response(
                start_workflow=StartWorkflowExecutionResponse(run_id="run-1", started=True)
            ),
            ExecuteMultiOperationResponse.Response(
                update_workflow=UpdateWorkflowExecutionResponse(
                    update_ref=ref,
                    stage=Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED,
                )
            ),
        ]
    )


FAILED = PollWorkflowExecutionUpdateResponse(
    outcome=Outcome(
        failure=Failure(
            message="the workflow failed",
            application_failure_info=ApplicationFailureInfo(type="WorkflowFailed"),
        )
    ),
    stage=Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED,
)
"""A poll's answer: the Update completed with a failure of the workflow's own."""

SIGNALLED = SignalWorkflowExecutionResponse()


class Frontend(ServiceClient):
    """Each request answered by its plan (see the module): ``plan[rpc]`` is
    a list of answers, used in order, the last one again and again."""

    def __init__(self) -> None:
        super().__init__(ConnectConfig(target_host="127.0.0.1:7233"))
        self.plan: dict[str, list[Any]] = {
            "execute_multi_operation": [ACCEPTED],
            "poll_workflow_execution_update": [FAILED],
            "signal_workflow_execution": [SIGNALLED],
            "check": [HEALTHY],
        }
        self.calls: list[str] = []

    def answer(self, rpc: str, *answers: Any) -> None:
        self.plan[rpc] = list(answers)

    @property
    def worker_service_client(self) -> Any:
        raise NotImplementedError("no worker runs on this frontend")

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        return None

    def update_api_key(self, api_key: str | None) -> None:
        return None

    async def _rpc_call(
        self,
        rpc: str,
        req: Any,
        resp_type: Any,
        *,
        service: str,
        retry: bool,
        metadata: Mapping[str, str | bytes],
        timeout: timedelta | None,  # noqa: ASYNC109  (the SDK's signature)
    ) -> Any:
        self.calls.append(rpc)
        answers = self.plan.get(rpc)
        if not answers:
            raise AssertionError(f"the test planned no answer to {rpc}")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if answer is SILENT:
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer(req)
        return answer


def client_of(frontend: Frontend) -> Client:
    return Client(frontend, namespace="default")
