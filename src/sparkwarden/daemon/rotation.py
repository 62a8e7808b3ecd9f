"""When a replica leaves the gateway's rotation and comes back outside a run. Pure.

A run takes the replica out itself (``leave_rotation``) and brings it back once its own gateway
path answers (``rejoin_rotation``): :mod:`sparkwarden.restart.rotation_steps`. Outside a run:

- a planned restart leaves at the start of its drain (:func:`sparkwarden.daemon.gates.gate`),
  so the requests in flight finish while new ones go to a peer;
- out for a drain whose restart no longer comes (dropped by a hold, or the daemon that drained
  was killed), and the engine serving: back in, once its own path answers;
- out since a run that did not bring it back (it failed): it stays out, notified once (noted in
  the flag, so a restarted daemon does not say it again), until a run ends well;
- in observe mode (a reload from act mode may leave a flag): any flag sparkwarden wrote is
  taken back once the engine serves, since observe mode takes no replica out;
- a flag sparkwarden did not write is an operator's: left alone.
"""

from __future__ import annotations

from sparkwarden.config.schema import Config
from sparkwarden.daemon.decide import Mind, Transition
from sparkwarden.daemon.intents import Notify, RejoinRotation, RotationTold, Say
from sparkwarden.daemon.observe import Observation


def on_rotation(mind: Mind, seen: Observation, cfg: Config, run_going: bool) -> Transition:
    """What the rotation flag, as the box has it now, calls for."""
    out = seen.rotation
    if cfg.replicas is None or cfg.rotation is None:
        return mind, []
    if out is None or run_going or out.by_hand:
        return mind, []
    me = cfg.replicas.self
    observing = cfg.watch.mode == "observe"  # it takes none out: one it left is taken back
    if out.run is not None and not observing:  # a run took it out and did not bring it back
        if out.told:
            return mind, []
        summary = (
            f"{me} stays out of the gateway's rotation: run #{out.run} did not bring it back "
            "(sparkwarden history); a run that ends well puts it back (sparkwarden restart)"
        )
        said = {"run": out.run, "since": out.since}
        return mind, [
            Say("warning", "out_of_rotation", said),
            Notify("out_of_rotation", me, summary, said),
            RotationTold(),
        ]
    pending = mind.pending
    if pending is not None and pending.drain is not None and not observing:
        return mind, []  # its drain goes on
    check = seen.check
    if not seen.running or check is None or check.health.status != "up":
        return mind, []
    why = "observe mode takes no replica out" if observing else "its restart no longer comes"
    return mind, [RejoinRotation(f"out ({out.why}): {why}")]
