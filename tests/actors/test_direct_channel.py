"""The shard's direct channel (``quotaplane.actors._direct``) on real loopback sockets, without Ray.

Only a peer that presents the shard's token gets a byte decoded; a bad batch is answered and the connection
goes on; ``serialized`` puts every public method under the instance's lock.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time

import pytest

from quotaplane.actors._direct import MAX_FRAME_BYTES, DirectChannelServer, read_frame, serialized, write_frame


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, object]] = []

    def serve(self, kind: str, offset: int, items: object) -> tuple[int, list[int]]:
        if kind == "bad":
            raise ValueError("item 0: expected a tuple")
        if kind == "boom":
            raise RuntimeError("the core broke")
        self.calls.append((kind, offset, items))
        return offset, [len(items)]  # type: ignore[arg-type]


@pytest.fixture
def server():
    recorder = Recorder()
    server = DirectChannelServer(recorder.serve, "127.0.0.1")
    yield server, recorder
    server.close()


def connect(server: DirectChannelServer, token: bytes | None = None) -> tuple[socket.socket, object]:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    write_frame(sock, server.token if token is None else token)
    return sock, sock.makefile("rb")


def ask(sock: socket.socket, stream: object, request: object) -> object:
    write_frame(sock, pickle.dumps(request))
    return pickle.loads(read_frame(stream))


def test_a_batch_is_served_and_answered_in_order(server):
    server, recorder = server
    sock, stream = connect(server)
    with sock:
        assert ask(sock, stream, ("usage", 7, [("PRODUCE", "u", "c", 1.0, 5)])) == ("ok", (7, [1]))
        assert ask(sock, stream, ("usage", 8, [1, 2, 3])) == ("ok", (8, [3]))
    assert recorder.calls == [("usage", 7, [("PRODUCE", "u", "c", 1.0, 5)]), ("usage", 8, [1, 2, 3])]


def test_a_wrong_token_closes_the_connection_before_anything_is_decoded(server):
    server, recorder = server
    sock, stream = connect(server, token=b"\x00" * 32)
    with sock:
        try:
            write_frame(sock, pickle.dumps(("usage", 1, [1])))
            answer = read_frame(stream)
        except (ConnectionError, OSError):
            answer = None
        assert answer is None  # closed, never answered
    assert recorder.calls == []


def test_bad_batches_and_failures_are_answered_and_the_connection_goes_on(server):
    server, recorder = server
    sock, stream = connect(server)
    with sock:
        assert ask(sock, stream, ("bad", 1, [])) == ("invalid", "item 0: expected a tuple")
        outcome, message = ask(sock, stream, ("boom", 1, []))
        assert outcome == "error" and "the core broke" in message
        write_frame(sock, b"not a pickle")
        outcome, _ = pickle.loads(read_frame(stream))
        assert outcome == "error"
        assert ask(sock, stream, ("usage", 2, [9])) == ("ok", (2, [1]))
    assert recorder.calls == [("usage", 2, [9])]


def test_a_frame_over_the_limit_closes_the_connection(server):
    server, _ = server
    sock, stream = connect(server)
    with sock:
        sock.sendall((MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        try:
            answer = read_frame(stream)
        except (ConnectionError, OSError):
            answer = None
        assert answer is None
    # the server still takes new connections
    sock, stream = connect(server)
    with sock:
        assert ask(sock, stream, ("usage", 3, [1])) == ("ok", (3, [1]))


def test_serialized_methods_take_turns_under_the_instance_lock():
    @serialized
    class Core:
        def __init__(self) -> None:
            self.serving_lock = threading.RLock()
            self.inside = 0
            self.overlaps = 0

        def work(self) -> None:
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1
            time.sleep(0.001)
            self.inside -= 1

        def nested(self) -> None:
            self.work()  # re-entrant: a public method may call another

    core = Core()
    threads = [threading.Thread(target=lambda: [core.work() for _ in range(20)]) for _ in range(4)]
    threads.append(threading.Thread(target=core.nested))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.overlaps == 0 and core.inside == 0
