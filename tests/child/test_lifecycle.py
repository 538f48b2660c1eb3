"""Lifecycle over the wire: initialize and version negotiation, ping, shutdown and exit."""

from __future__ import annotations

import os

from child_harness import ChildProcess

NOT_INITIALIZED = -32000
ALREADY_INITIALIZED = -32001
UNSUPPORTED_VERSION = -32002


def test_initialize_answers_with_version_server_info_pid_and_capabilities() -> None:
    with ChildProcess() as child:
        result = child.initialize()["result"]
        assert result["protocolVersion"] == 1
        assert result["serverInfo"]["name"] == "tether-child"
        assert result["serverInfo"]["version"]
        assert result["pid"] == child.proc.pid
        assert result["capabilities"]["agentRun"] is True
        assert result["capabilities"]["agentMessage"] is True
        assert result["capabilities"]["parentTools"] is True
        assert "complete" in result["capabilities"]["tools"]
        assert result["maxMessageBytes"] == 32 * 1024 * 1024


def test_a_request_before_initialize_gets_not_initialized() -> None:
    with ChildProcess() as child:
        response = child.call("ping")
        assert response["error"]["code"] == NOT_INITIALIZED
        assert "initialize" in response["error"]["message"]
        child.initialize()
        assert child.call("ping")["result"] == {}


def test_a_second_initialize_gets_already_initialized() -> None:
    with ChildProcess() as child:
        child.initialize()
        again = child.call("initialize", {"protocolVersion": 1, "clientInfo": {"name": "t"}})
        assert again["error"]["code"] == ALREADY_INITIALIZED


def test_an_unsupported_version_is_refused_with_the_versions_the_child_speaks() -> None:
    with ChildProcess() as child:
        refused = child.call("initialize", {"protocolVersion": 99, "clientInfo": {"name": "t"}})
        assert refused["error"]["code"] == UNSUPPORTED_VERSION
        assert refused["error"]["data"] == {"supportedVersions": [1]}
        # A refused handshake leaves the child uninitialized: the parent may retry.
        assert child.initialize()["result"]["protocolVersion"] == 1


def test_ping_answers_an_empty_object() -> None:
    with ChildProcess() as child:
        child.initialize()
        assert child.call("ping") == {"jsonrpc": "2.0", "id": child._next_id, "result": {}}


def test_the_child_moved_its_stdout_to_stderr_and_its_stdin_to_dev_null() -> None:
    with ChildProcess() as child:
        child.initialize()  # by now __main__ has run its fd set-up
        fds = f"/proc/{child.proc.pid}/fd"
        assert os.readlink(f"{fds}/0") == "/dev/null"
        assert os.readlink(f"{fds}/1") == os.readlink(f"{fds}/2")


def test_notifications_never_get_a_response() -> None:
    with ChildProcess() as child:
        child.initialize()
        child.notify("no/such/notification", {"x": 1})
        child.notify("agent/cancel", {"runId": "not-a-run"})
        child.notify("agent/cancel", {"wrong": "params"})
        ping = child.request("ping")
        # The very next line is the ping's answer: nothing was said about the notifications.
        assert child.read()["id"] == ping


def test_shutdown_answers_null_then_exit_ends_the_child_with_status_0() -> None:
    with ChildProcess() as child:
        child.initialize()
        assert child.call("shutdown") == {"jsonrpc": "2.0", "id": child._next_id, "result": None}
        child.notify("exit")
        assert child.wait_exit() == 0


def test_exit_without_shutdown_still_ends_the_child_promptly_but_not_with_status_0() -> None:
    with ChildProcess() as child:
        child.initialize()
        child.notify("exit")
        assert child.wait_exit() == 1


def test_a_reply_to_an_unknown_request_id_is_ignored_and_the_child_keeps_serving() -> None:
    with ChildProcess() as child:
        child.initialize()
        child.reply(424242, {"anything": True})
        child.reply_error(None, -32700, "the parent could not parse something")
        assert child.call("ping")["result"] == {}


def test_end_of_input_after_shutdown_ends_the_child_with_status_0_and_nothing_more_said() -> None:
    with ChildProcess() as child:
        child.initialize()
        assert child.call("shutdown")["result"] is None
        child.close_stdin()
        assert child.wait_exit() == 0
        assert os.read(child._out, 1 << 16) == b"" and not child._buf


def test_a_session_is_settled_only_once_stopped_after_a_completed_shutdown() -> None:
    from tether.child.session import EXIT_OK, Session

    session = Session(None)
    assert not session.settled
    session.shutting_down = True
    assert not session.settled  # not stopped yet
    session.stop(EXIT_OK)
    assert session.settled
    abrupt = Session(None)
    abrupt.stop(EXIT_OK)  # end of input without a shutdown: runs may still be answering
    assert not abrupt.settled
