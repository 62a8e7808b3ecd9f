"""``sparkwarden status``: one snapshot, as JSON (a contract) or as text for an SSH session.

The daemon publishes the snapshot over its socket and writes it atomically to the state dir, so
status still answers, from that file, when the daemon is down, and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkwarden.base.columns import fit_all
from sparkwarden.base.errors import MEMBERS_ONLY, SparkwardenError
from sparkwarden.base.exits import Exit

STATUS_FILE = "status.json"
#: ``status --json``'s mark of a state dir with no snapshot at all (the daemon never ran here)
NO_SNAPSHOT = "no_snapshot"

EXIT_OK, EXIT_PROBLEM, EXIT_NO_DAEMON = Exit.OK, Exit.FAILED, Exit.NO_DAEMON
#: The daemon's state when status had to read the file instead.
NOT_RUNNING = "not running"
NOT_ANSWERING = "not answering"
#: A wait's command when none need be typed: it ends by itself (a run under way, an exit
#: settling, a removal); shown as no command wherever a wait is said.
BY_ITSELF = "-"
#: C0 and C1 control characters: what a terminal would act on rather than show.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def write_atomic(path: Path, snapshot: dict[str, Any]) -> None:
    """Write-then-rename: a reader never sees half a file, a crash never leaves one."""
    import tempfile  # the daemon's only: ``status`` reads, and must start fast

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".status-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(snapshot, handle, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o640)
        with contextlib.suppress(PermissionError):  # root's daemon: the dir's group reads it
            os.chown(tmp, -1, path.parent.stat().st_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def share(state_dir: Path, gid: int) -> None:
    """Give the state dir and what is in it to group ``gid`` (dir 0750, files 0640: read only),
    so a member's ``status`` reads the last snapshot when the daemon is down."""
    for path in (state_dir, *state_dir.iterdir()):
        if path.stat().st_gid != gid:
            os.chown(path, -1, gid)


def read(path: Path) -> dict[str, Any] | None:
    """The snapshot, or None when there is none yet; a file we may not read is an error."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except PermissionError as exc:
        raise SparkwardenError(
            f"cannot read the last snapshot {path}: {exc.strerror} ({MEMBERS_ONLY})"
        ) from None
    except (OSError, ValueError):
        return None
    return data


def exit_code(snapshot: dict[str, Any]) -> int:
    """1 when the box needs a person: given up, reboot required, the LLM down, the users'
    gateway failing (the engine may be fine, the users are not), or on a cluster's head a node
    unreachable or a worker's engine down; 3 when the daemon is down but
    its last word was sound."""
    if (
        snapshot.get("gave_up")
        or snapshot.get("reboot_required")
        or snapshot.get("llm", {}).get("status") != "running"
        or (snapshot.get("gateway") or {}).get("ok") is False
        or (snapshot.get("cluster") or {}).get("problems")
    ):
        return EXIT_PROBLEM
    if not snapshot.get("daemon", {}).get("running"):
        return EXIT_NO_DAEMON
    return EXIT_OK


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def local_time(iso: str | None) -> str:
    if not iso:
        return "-"
    moment = datetime.fromisoformat(iso).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M %Z")


#: where the drafting canary's numbers come from, by ``own_stats``
SOURCES: dict[bool | None, str] = {True: "own stats", False: "idle only", None: "source unknown"}


def _canary_lines(c: dict[str, Any]) -> list[str]:
    """The drafting canary: what it last measured and what it makes of the passive estimate."""
    if c.get("confirm") != "canary":
        return ["canary:      off (acceptance.confirm = none: the passive estimate acts alone)"]
    health = c.get("health")
    head = (
        f"canary:      health {'-' if health is None else f'{health:.2f}'}, "
        f"{c.get('valid', 0)} valid, {c.get('discarded', 0)} discarded, "
        + SOURCES[c.get("own_stats")]
        + (", SUSPICIOUS" if c.get("suspicious") else "")
    )
    return [head, f"{INDENT}{c.get('note') or '-'}"]


def ends_with(command: str | None) -> str | None:
    """The command an operator types to end a wait; None when it ends by itself."""
    return None if command in (None, BY_ITSELF) else command


def format_text(s: dict[str, Any]) -> str:
    """Plain lines under 80 columns: no colour, no TTY needed."""
    daemon, llm, mem = s.get("daemon", {}), s.get("llm", {}), s.get("memory", {})
    acc, budget, hold = s.get("acceptance", {}), s.get("budget", {}), s.get("hold")
    if daemon.get("running"):
        state = daemon.get("state")
        if daemon.get("waiting"):  # the LLM is down: what for, and what ends the wait
            lead = "" if state == "waiting" else f"{state}, "
            state = f"{lead}waiting for {daemon['waiting']}"
            if command := ends_with(daemon.get("command")):
                state += f"; ends with '{command}'"
        head = f"running (pid {daemon.get('pid')}), {state}"
    else:
        state = str(daemon.get("state") or NOT_RUNNING)
        why, _, detail = state.partition(": ")
        head = f"{why.upper()}; last known state from {s.get('written_at') or 'nowhere'}"
    lines = [f"sparkwarden: {head}", *_version_lines(daemon.get("version"))]
    boot = s.get("booting")
    if boot:
        cause = f": {boot['why']}" if boot.get("why") else ""
        lines.append(
            f"booting:     run #{boot['run']} ({boot['reason']}{cause}) waits for the engine: "
            f"{duration(boot['waited_s'])} of health_timeout {duration(boot['health_timeout_s'])}"
        )
    if not daemon.get("running") and detail:
        lines.append(f"             {detail}")
    if s.get(NO_SNAPSHOT):  # the daemon never wrote one here: only the host's memory is known
        known = [*lines, *_unknown_lines(mem), *_cluster_lines(s.get("cluster"))]
        return fit_all([inert(line) for line in known], WIDTH, INDENT)
    if daemon.get("drain"):
        lines.append(f"drain:       {daemon['drain']}")
    lines += replica_lines(s.get("replicas"))
    if s.get("reboot_required"):
        trend = s.get("memory_trend") or {}
        after = " -> ".join(f"{g:.1f}" for g in trend.get("available_after_drop_gib", []))
        lines.append(f"REBOOT REQUIRED: memory nobody holds grew; free after {after} GiB")
        lines.append("             no automatic restarts; after the reboot: 'sparkwarden reset'")
    if s.get("gave_up"):
        g = s["gave_up"]
        lines.append(f"GAVE UP:     {g.get('why')} (reason {g.get('reason')})")
        lines.append("             run 'sparkwarden reset' when the cause is fixed")
    uptime = f", up {duration(llm.get('uptime_s'))}" if llm.get("uptime_s") is not None else ""
    lines.append(
        f"llm:         {llm.get('container') or '-'} {llm.get('status') or 'unknown'}{uptime}"
    )
    if llm.get("note"):
        lines.append(f"             {llm['note']}")
    observing = daemon.get("mode") == "observe"
    lines.extend(_policy_lines(s.get("restart_policy") or {}, observing))
    if observing:
        lines += _observing_lines(s.get("observed"))
    lines.append(f"health:      {llm.get('health') or '-'}")
    lines += _engine_lines(s.get("engine") or {})
    if llm.get("last_probe"):
        lines.append(f"last probe:  {llm['last_probe']}")
    gateway = s.get("gateway")
    if gateway:
        said = gateway.get("last") or "-"
        lines.append(f"gateway:     {gateway['url']}: {said}")
    if acc.get("available") is False:
        lines.append("acceptance:  no spec-decode metrics: trigger off")
    else:
        health = acc.get("health")
        lines.append(
            f"acceptance:  {_pct(acc.get('current'))} now, baseline {_pct(acc.get('baseline'))}, "
            f"health {'-' if health is None else f'{health:.2f}'}"
        )
        lines.append(f"             {acc.get('note') or '-'}")
        lines += _canary_lines(acc.get("canary") or {})
    for name, why in (s.get("off") or {}).items():
        lines.append(f"off:         {name}: {why}")
    lines.append(
        f"memory:      {mem.get('available_gib', 0):.1f} of {mem.get('total_gib', 0):.1f}"
        f" GiB available{' (BELOW FLOOR)' if mem.get('below_floor') else ''}"
    )
    if mem.get("held_gib") is not None:  # held is no leak; what nobody holds may be
        lines.append(
            f"             held by processes and containers {mem['held_gib']:.1f} GiB, "
            f"by nobody {mem.get('unheld_gib') or 0:.1f} GiB"
        )
    nxt = s.get("next_restart")
    lines.append(
        f"next:        {local_time(nxt.get('at')) if nxt else '-'}"
        f"{' (' + nxt['reason'] + ')' if nxt else ''}"
    )
    lines.append(
        f"budget:      {budget.get('used', 0)} of {budget.get('limit', '?')} automatic "
        f"runs used{' - ' + budget['why'] if budget.get('why') not in (None, 'ok') else ''}"
    )
    lines.append(
        f"hold:        until {local_time(hold['until'])} {hold.get('reason') or ''}"
        if hold
        else "hold:        none"
    )
    last = s.get("last_run")
    if last:
        took = f" in {duration(last.get('duration_s'))}" if last.get("duration_s") else ""
        lines.append(
            f"last run:    #{last['id']} {last['reason']} {last['result']}{took}, "
            f"{local_time(last.get('started_at'))}"
        )
        if last.get("error"):
            lines.append(f"             {last['error']}")
        steps = [
            f"{st['name']} {st['duration_s'] or 0:.1f}s"
            if st["result"] == "ok"
            else f"{st['name']} {st['result']}"
            for st in last.get("steps", [])
        ]
        for row in _wrap(steps, WIDTH - len(INDENT)):
            lines.append(f"{INDENT}{row}")
        lines.append(f"{INDENT}why it ran, and how: 'sparkwarden why {last['id']}'")
    lines += _cluster_lines(s.get("cluster"))
    return fit_all([inert(line) for line in lines], WIDTH, INDENT)  # escaped, then wrapped


def replica_lines(replicas: dict[str, Any] | None) -> list[str]:
    """A replica: what its planned restart waits for, each peer, and whose turn it is."""
    if not replicas:
        return []
    lines = []
    if "serving_count" in replicas:  # a daemon older than the count says none
        lines.append(
            f"replicas:    {replicas['serving_count']} of {replicas.get('count')} serving"
            f" (this one: {replicas.get('why') or '-'})"
        )
    if out := replicas.get("rotation"):
        since = local_time(datetime.fromtimestamp(float(out["since"]), UTC).isoformat())
        lines.append(
            f"rotation:    OUT since {since}: {out.get('why') or '-'}"
            + ("; only its writer ends it" if out.get("by_hand") else "")
        )
    if replicas.get("waits_for"):
        lines.append(f"planned:     waits for {replicas['waits_for']}")
    if not replicas.get("at"):
        return [*lines, "peers:       not looked at yet"]
    for peer in replicas.get("peers") or []:
        said = "serving" if peer.get("serving") else "NOT SERVING"
        lines.append(f"peer:        {peer.get('name')} {said}: {peer.get('why') or '-'}")
    turn = replicas.get("turn")
    if turn is None:
        lines.append(f"turn:        unread: {replicas.get('turn_error') or 'no answer'}")
    elif turn.get("holder"):
        lines.append(
            f"turn:        {turn['holder']}'s, expires in {duration(turn.get('expires_in') or 0)}"
        )
    else:
        lines.append("turn:        free")
    return lines


#: Wide enough for any terminal; continuation lines start under the values.
WIDTH = 79
INDENT = " " * 13


def _version_lines(running: str | None) -> list[str]:
    """The version the daemon runs, and a word when the installed code is another (an upgrade
    not yet restarted onto: ``install-service`` restarts it)."""
    from sparkwarden.base.version import version

    installed = version()
    if not running or running == installed:
        return [f"version:     {running or installed}"]
    return [
        f"version:     {running} runs; {installed} is installed: run 'sparkwarden "
        "install-service' to restart onto it"
    ]


def _cluster_lines(cluster: dict[str, Any] | None) -> list[str]:
    """On a cluster's head: the whole, then one line per node."""
    if not cluster:
        return []
    from sparkwarden.cluster.verdict import describe, from_json  # a cluster's head only

    lines = [f"cluster:     {cluster.get('state')}: {cluster.get('summary')}"]
    for view in from_json(cluster.get("nodes") or {}):
        reach = "reachable" if view.reachable else "UNREACHABLE"
        lines.append(f"  {view.name:<10} {view.role:<6} {reach:<11} {describe(view)}")
    return lines


def inert(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN``: what a member wrote (a hold
    reason) or an engine answered never moves root's cursor, clears a screen or sets a title."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _engine_lines(engine: dict[str, Any]) -> list[str]:
    """What the engine says of itself: release, sleep, users turned away by its queue limits."""
    if not engine:
        return []
    said = f"vLLM {engine['release']}" if engine.get("release") else "vLLM (release unknown)"
    if engine.get("sleeping"):
        said += f", SLEEPING (level {engine.get('sleep_level')}): not restarted"
    lines = [f"engine:      {said}"[:79]]
    refused = engine.get("rejections") or {}
    waiting = engine.get("waiting_by_reason") or {}
    if refused or waiting:
        parts = [f"turned away {sum(refused.values()):g}"] if refused else []
        parts += [f"{why} {n:g}" for why, n in refused.items() if n]
        parts += [f"waiting for {why} {n:g}" for why, n in waiting.items() if n]
        lines.append(f"queue:       {', '.join(parts) or 'nobody waiting'}"[:79])
    return lines


def _unknown_lines(mem: dict[str, Any]) -> list[str]:
    """Status with no snapshot at all (the daemon never ran here, or ran on another
    ``state.dir``): it says so, rather than defaults that read as facts."""
    return [
        "llm:         unknown: no snapshot yet (the daemon writes one at each check)",
        f"memory:      {mem.get('available_gib', 0):.1f} of {mem.get('total_gib', 0):.1f}"
        " GiB available",
        "start it:    systemctl start sparkwarden (or see: systemctl status sparkwarden)",
    ]


def _observing_lines(observed: dict[str, Any] | None) -> list[str]:
    """Observe mode: nothing is touched; the newest restart it would have made."""
    lines = ["observing:   watch.mode = observe: decides and tells, touches nothing"]
    if observed is None:
        return [*lines, "             would have restarted: nothing yet"]
    at = local_time(observed.get("started_at"))
    head = f"             would have restarted: #{observed['id']} {observed['reason']}, {at}"
    why = (observed.get("plan") or {}).get("why") or ""
    return [*lines, head, *([f"             {why}"] if why else [])]


def _policy_lines(policy: dict[str, Any], observing: bool = False) -> list[str]:
    """Docker's restart policy: what sparkwarden took over, and, always, what is left at risk."""
    lines = [
        f"policy:      {name}: Docker's {was!r} taken over, now 'no'"
        for name, was in (policy.get("taken") or {}).items()
        if name not in (policy.get("at_risk") or {})
    ]
    for name, now in (policy.get("at_risk") or {}).items():
        why = "llm.restart_policy = leave" if policy.get("mode") == "leave" else "see the log"
        if observing:
            why = "watch.mode = observe takes none over"
        lines.append(f"RISK:        {name}: Docker restart policy {now!r}")
        lines.append(f"             restarts a crash into ghost memory ({why})")
    return lines


def _wrap(items: list[str], width: int) -> list[str]:
    rows, row = [], ""
    for item in items:
        candidate = f"{row}, {item}" if row else item
        if len(candidate) > width and row:
            rows.append(row + ",")
            row = item
        else:
            row = candidate
    if row:
        rows.append(row)
    return rows
