"""Docker's restart policy against sparkwarden's safe restart: taking the LLM back from it.

A policy (``always``, ``unless-stopped``, ``on-failure``) makes Docker start a crashed engine at
once, into the ghost memory the dead one left: the restart sparkwarden exists to prevent, and a
loop that leaks memory. With ``llm.restart_policy = "take-over"`` the daemon sets such a policy to
``no`` and records the original in the journal, so ``uninstall-service`` can give it back; with
``"leave"`` the policy stays and status shows the risk. Pure: the daemon and ``uninstall-service``
do the Docker calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sparkwarden.base.containers import FIGHTING, ContainerState

Mode = Literal["take-over", "leave"]


@dataclass(frozen=True)
class Policy:
    """A Docker restart policy as ``docker update --restart`` spells it."""

    name: str
    retries: int = 0

    def __str__(self) -> str:
        return (
            f"{self.name}:{self.retries}"
            if self.name == "on-failure" and self.retries
            else self.name
        )

    def docker(self) -> dict[str, Any]:
        """The ``RestartPolicy`` object of Docker's API."""
        return {"Name": self.name, "MaximumRetryCount": self.retries}

    @classmethod
    def of(cls, state: ContainerState) -> Policy:
        return cls(state.restart_policy, state.restart_retries)


NO: Final = Policy("no")


def fights(state: ContainerState) -> bool:
    return state.restart_policy in FIGHTING


def to_take_over(states: Sequence[ContainerState], mode: Mode) -> list[ContainerState]:
    """The LLM candidates whose policy would restart them behind sparkwarden's back."""
    return [s for s in states if mode == "take-over" and fights(s)]


def remember(taken: dict[str, Any], state: ContainerState, at: str) -> dict[str, Any]:
    """The journal's record with this container's original added.

    A policy seen again (an operator set it back, compose recreated the container) replaces the
    record: the latest policy the operator chose is the one ``uninstall-service`` restores.
    """
    original = Policy.of(state)
    entry = {"name": original.name, "retries": original.retries, "at": at, "id": state.id}
    return {**taken, state.name: entry}


def recorded(entry: dict[str, Any]) -> Policy:
    return Policy(str(entry["name"]), int(entry.get("retries", 0)))


def to_restore(
    taken: dict[str, Any], states: dict[str, ContainerState | None]
) -> list[tuple[str, Policy | None, str]]:
    """What ``uninstall-service`` does per recorded container: the policy to set back, or none
    and why (the container is gone or was recreated, or the operator chose another policy)."""
    plan: list[tuple[str, Policy | None, str]] = []
    for name, entry in taken.items():
        state, original = states.get(name), recorded(entry)
        if state is None:
            plan.append((name, None, f"{name} no longer exists: nothing to restore"))
        elif entry.get("id") and state.id != entry["id"]:  # the record is of the container, by ID
            plan.append(
                (name, None, f"{name} was recreated since (id {state.id[:12]}): left as it is")
            )
        elif state.restart_policy != NO.name:
            now = str(Policy.of(state))
            plan.append((name, None, f"{name} has restart policy {now!r} now: left as it is"))
        else:
            plan.append((name, original, f"restoring {name}'s restart policy {str(original)!r}"))
    return plan


@dataclass(frozen=True)
class PolicyView:
    """The status snapshot's ``restart_policy``: container to Docker policy, taken and at risk."""

    mode: Mode
    taken: dict[str, str]
    at_risk: dict[str, str]


def report(mode: Mode, states: Sequence[ContainerState], taken: dict[str, Any]) -> PolicyView:
    """What was taken over, and what Docker may still restart behind sparkwarden's back.

    Under ``take-over`` a recorded container is being taken (the record is written before the
    call and withdrawn if the call fails), so only one that could not be taken is at risk.
    """
    return PolicyView(
        mode=mode,
        taken={name: str(recorded(entry)) for name, entry in taken.items()},
        at_risk={
            s.name: str(Policy.of(s))
            for s in states
            if fights(s) and (mode == "leave" or s.name not in taken)
        },
    )
