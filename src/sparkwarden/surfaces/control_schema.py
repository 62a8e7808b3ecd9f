"""The requests the control socket accepts: what an operator may ask the daemon, schema-checked.

The CLI builds them, the daemon's :mod:`sparkwarden.daemon.handlers` answers them; both parse
through here, so a request the CLI sends is checked the same way the daemon checks it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sparkwarden.base.errors import SparkwardenError

# The CLI builds a request's reason with no pydantic imported (``restart`` starts quickly).

#: No C0/C1 control characters: a reason or a note is printed on root's terminal.
INERT = r"^[^\x00-\x1f\x7f-\x9f]*$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StatusRequest(_Request):
    cmd: Literal["status"]


#: An operator's reason: ``manual`` or ``manual:<text>``, never a trigger's (a member naming it
#: ``crash`` would spend the budget and forge the record).
ManualReason = Annotated[
    str, Field(min_length=1, max_length=71, pattern=r"^manual(:[^\x00-\x1f\x7f-\x9f]+)?$")
]


class RestartRequest(_Request):
    """Always an operator's run, under a :data:`ManualReason`."""

    cmd: Literal["restart"]
    reason: ManualReason = "manual"


class DryRunRequest(_Request):
    """``restart --dry-run``: the plan of the restart the daemon would run now, touching
    nothing; kept in history as a dry run under the same kind of reason as a restart."""

    cmd: Literal["dry-run"]
    reason: ManualReason = "manual"


class HoldRequest(_Request):
    cmd: Literal["hold"]
    seconds: Annotated[float, Field(gt=0, le=30 * 86400)]
    reason: Annotated[str, Field(max_length=200, pattern=INERT)] = ""


class ReleaseRequest(_Request):
    cmd: Literal["release"]


class ResetRequest(_Request):
    cmd: Literal["reset"]


class FaultRequest(_Request):
    """Test-only: honoured when the daemon runs with ``SPARKWARDEN_ENABLE_FAULTS=1``."""

    cmd: Literal["fault"]
    name: Literal["hang-loop"]


Request = Annotated[
    StatusRequest
    | RestartRequest
    | DryRunRequest
    | HoldRequest
    | ReleaseRequest
    | ResetRequest
    | FaultRequest,
    Field(discriminator="cmd"),
]
_REQUEST = TypeAdapter(Request)


def parse_request(payload: dict[str, Any]) -> Any:
    """Validate a request built by the CLI, the same way the daemon does."""
    return _REQUEST.validate_python(payload)


class MalformedRequest(SparkwardenError):
    """A request that does not match the schema; the message names each problem."""


def parse_wire(raw: bytes) -> Any:
    """A request line off the socket, validated, or :class:`MalformedRequest`."""
    try:
        return _REQUEST.validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        raise MalformedRequest(f"malformed request: {problems}") from None
