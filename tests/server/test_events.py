"""Server-sent events against a real server: names, ids, heartbeats, Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from .conftest import Running
from .test_rest import create


@dataclass
class Sse:
    event: str
    id: str | None
    data: dict[str, Any]


def read_events(r: httpx.Response) -> Iterator[Sse]:
    fields: dict[str, str] = {}
    for line in r.iter_lines():
        if line == "":
            if "data" in fields:
                yield Sse(
                    fields.get("event", "message"), fields.get("id"), json.loads(fields["data"])
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def until(events: Iterator[Sse], done: str, limit: int = 200) -> list[Sse]:
    out: list[Sse] = []
    for ev in events:
        out.append(ev)
        if ev.event == done:
            return out
        assert len(out) < limit, [e.event for e in out]
    raise AssertionError(f"the stream ended before {done}: {[e.event for e in out]}")


def test_stream_names_ids_and_heartbeat(server: Running) -> None:
    with server.client() as c, server.client() as other:
        cid = create(c)
        with c.stream("GET", f"/api/contexts/{cid}/events") as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = read_events(r)
            assert next(events).event == "Heartbeat"  # nothing else happened
            other.post(f"/api/contexts/{cid}/messages", json={"content": "hello"})
            got = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
    kinds = [e.event for e in got]
    assert kinds[0] == "StateChanged" and "MessageCompleted" in kinds
    assert [int(e.id or 0) for e in got] == list(range(1, len(got) + 1))  # id: the seq
    assert all(e.data["kind"] == e.event for e in got)
    first = got[0].data
    assert first["new_state"] == first["to_state"] == "ProcessingUserMessage"
    assert got[-1].data["stop_reason"] == "completed"


def test_reconnect_mid_turn_loses_nothing_durable(server: Running) -> None:
    with server.client() as c:
        cid = create(c)
        with c.stream("GET", f"/api/contexts/{cid}/events") as r:
            events = read_events(r)
            turn = c.post(
                f"/api/contexts/{cid}/messages?wait=true", json={"content": "weather in Rome?"}
            ).json()
            first = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
        assert first[-1].data["stop_reason"] == "awaiting_approval"
        last = first[-1].id
        assert last is not None
        # away while the turn goes on: the approval runs the tool and the model
        call = turn["pending_tool_calls"][0]["id"]
        done = c.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": [call]})
        assert done.json()["state"] == "Idle"
        with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": last}) as r:
            again = [e for e in until(read_events(r), "TurnCompleted") if e.event != "Heartbeat"]
    seqs = [int(e.id or 0) for e in again]
    assert seqs == list(range(int(last) + 1, int(last) + 1 + len(again)))  # no gap, no repeat
    # every transition of the audit trail after the approval is there
    with server.client() as c:
        audit_text = c.get(f"/api/contexts/{cid}/audit").text
        stored = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
    audit = [json.loads(x) for x in audit_text.splitlines()]
    n_before = len([e for e in first if e.event == "StateChanged"])
    transitions = [(a["from"], a["to"]) for a in audit][n_before:]
    seen = [(e.data["from_state"], e.data["to_state"]) for e in again if e.event == "StateChanged"]
    assert seen == transitions and seen[-1][1] == "Idle"
    kinds = {e.event for e in again}
    assert {"ToolResult", "MessageCompleted", "TurnCompleted"} <= kinds
    completed = [e.data["message_id"] for e in again if e.event == "MessageCompleted"]
    assert completed[-1] == stored[-1]["id"]


def test_tenant_stream_sees_only_its_contexts(server: Running) -> None:
    with server.client("token-alice") as alice, server.client("token-bob") as bob:
        mine = create(alice)
        theirs = create(bob)
        with alice.stream("GET", "/api/events") as r:
            events = read_events(r)
            bob.post(f"/api/contexts/{theirs}/messages?wait=true", json={"content": "hi"})
            alice.post(f"/api/contexts/{mine}/messages?wait=true", json={"content": "hi"})
            got = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
    assert {e.data["context_id"] for e in got} == {mine}


def _until_turns(events: Iterator[Sse], turns: int, limit: int = 400) -> list[Sse]:
    """The events (no heartbeats) until ``turns`` TurnCompleted came."""
    out: list[Sse] = []
    beats = 0
    for ev in events:
        if ev.event != "Heartbeat":
            out.append(ev)
        else:  # every 0.5 s of nothing: 20 s is more than enough
            beats += 1
            assert beats < 40, f"no more events after {[e.event for e in out]}"
        if sum(e.event == "TurnCompleted" for e in out) == turns:
            return out
        assert len(out) < limit, [e.event for e in out]
    raise AssertionError(f"the stream ended: {[e.event for e in out]}")


def _positions(ident: str | None) -> dict[str, int]:
    from urllib.parse import unquote

    assert ident is not None
    return {unquote(c): int(s) for c, _, s in (p.rpartition("/") for p in ident.split(","))}


def test_tenant_stream_resumes_every_context_from_its_last_event_id(server: Running) -> None:
    """``Last-Event-ID`` on ``/api/events``: the id of each frame holds the
    stream's position in each context it sent; a reconnect with it gets, per
    context, every event after that position (no gap, no repeat), then the
    live ones."""
    with server.client() as c:
        a, b = create(c), create(c)
        with c.stream("GET", "/api/events") as r:
            events = read_events(r)
            for cid in (a, b):
                c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
            first = _until_turns(events, 2)
        last = first[-1].id
        at = _positions(last)
        assert at == {
            a: max(e.data["seq"] for e in first if e.data["context_id"] == a),
            b: max(e.data["seq"] for e in first if e.data["context_id"] == b),
        }
        # away: one more turn on each
        for cid in (b, a):
            c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "again"})
        with c.stream("GET", "/api/events", headers={"Last-Event-ID": last or ""}) as r:
            events = read_events(r)
            again = _until_turns(events, 2)
            # and live after the replay
            c.post(f"/api/contexts/{a}/messages?wait=true", json={"content": "live"})
            live = _until_turns(events, 1)
    for cid in (a, b):
        seqs = [e.data["seq"] for e in again if e.data["context_id"] == cid]
        assert seqs == list(range(at[cid] + 1, at[cid] + 1 + len(seqs))), (cid, seqs)
        assert seqs, cid
    assert [e.event for e in again].count("TurnCompleted") == 2
    assert all(e.event != "Resync" for e in again)  # the ring still held them
    # each frame's id is the position after it
    assert _positions(again[-1].id) == {
        cid: max(e.data["seq"] for e in again if e.data["context_id"] == cid) for cid in (a, b)
    }
    seqs = [e.data["seq"] for e in live]
    assert {e.data["context_id"] for e in live} == {a}
    assert seqs[0] == _positions(again[-1].id)[a] + 1


def test_tenant_stream_last_event_id_bad_ahead_and_not_yours(server: Running) -> None:
    with server.client("token-alice") as alice, server.client("token-bob") as bob:
        mine = create(alice)
        theirs = create(bob)
        alice.post(f"/api/contexts/{mine}/messages?wait=true", json={"content": "hi"})
        bob.post(f"/api/contexts/{theirs}/messages?wait=true", json={"content": "hi"})
        newest = alice.get(f"/api/contexts/{mine}").json()["event_seq"]
        for bad in ["12", f"{mine}/x", f"{mine}/-1", f"{mine}/1,", "/4"]:
            r = alice.get("/api/events", headers={"Last-Event-ID": bad})
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["error"]["where"] == "header.last-event-id", r.text
        # ahead of the context: one Resync up to its last seq; another tenant's: nothing
        ident = f"{mine}/{newest + 50},{theirs}/0"
        with alice.stream("GET", "/api/events", headers={"Last-Event-ID": ident}) as r:
            events = read_events(r)
            resync = next(e for e in events if e.event != "Heartbeat")
            alice.post(f"/api/contexts/{mine}/messages?wait=true", json={"content": "more"})
            live = _until_turns(events, 1)
    assert resync.event == "Resync"
    assert (resync.data["context_id"], resync.data["last_seq"]) == (mine, newest)
    assert _positions(resync.id) == {mine: newest}
    assert {e.data["context_id"] for e in live} == {mine}
    assert live[0].data["seq"] == newest + 1


# --------------------------------------------------------------------- frames and batches


def _events() -> list[Any]:
    from turnfsm.events import ContentDelta, StateChanged, TurnCompleted

    return [
        StateChanged(
            context_id="c", seq=1, timestamp=1.5, from_state="Idle", to_state="X", trigger="t"
        ),
        ContentDelta(
            context_id="c",
            seq=2,
            timestamp=1.5,
            message_id="m",
            delta='line\nbreak "quoted" \u00e9\r',
            index=7,
            attempt=1,
        ),
        TurnCompleted(context_id="c", seq=3, timestamp=2.0, stop_reason="completed", state="Idle"),
    ]


def test_a_frame_is_what_sse_starlette_writes_and_one_data_line() -> None:
    from sse_starlette import ServerSentEvent

    from turnfsm.server._sse import event_frame, event_json, json_frame, sse_frame

    for ev in _events():
        frame = event_frame(ev)
        data = event_json(ev).decode()
        assert frame == ServerSentEvent(data, event=ev.kind, id=str(ev.seq)).encode()
        assert frame.count(b"data:") == 1 and frame.endswith(b"\r\n\r\n")
    assert event_frame(_events()[0], "c/1").startswith(b"id: c/1\r\n")
    # the one framing helper, for every stream: with or without id and event
    for ident in (None, "7"):
        for event in (None, "record"):
            value = {"kind": "x", "text": "two\nlines é"}
            expected = ServerSentEvent(json.dumps(value), event=event, id=ident).encode()
            assert json_frame(value, event, ident) == expected
    assert sse_frame(b"[DONE]") == ServerSentEvent("[DONE]").encode() == b"data: [DONE]\r\n\r\n"


def test_event_json_carries_the_names_thin_frontends_read() -> None:
    from turnfsm.events import EVENT_ADAPTER
    from turnfsm.server._sse import event_json

    changed, delta, done = _events()
    data = json.loads(event_json(changed))
    assert data["new_state"] == data["to_state"] == "X"
    data = json.loads(event_json(delta))
    assert data["sequence"] == data["index"] == 7
    assert data["delta"] == 'line\nbreak "quoted" \u00e9\r'
    assert json.loads(event_json(done)) == EVENT_ADAPTER.dump_python(done, mode="json")


def test_a_listener_hands_out_what_is_queued_in_order_gaps_last() -> None:
    from turnfsm.server._channels import Gap, Listener

    one, two, three = _events()
    listener = Listener(cap=2)
    for ev in (one, two, three):  # the third is over the cap: a gap for it
        listener.put(ev)
    assert listener.ready(limit=1) == [one]
    assert listener.ready() == [two, Gap("c", 3, 3)]
    assert listener.ready() == []
    listener.put(one)
    listener.close()
    assert listener.ready() == [one] and listener.closed
