"""``--provider`` as a user meets it: the command line's entry
(``turnfsm.cli.main``, in this process, with the environment a fresh process
would get; ``serve`` in a thread of this process; ``worker`` and a missing
extra as ``turnfsm`` processes of their own) against a loopback server
speaking the provider's streaming format (the bodies of ``tests/anthropic``'s
corpus, byte for byte), the setup problems said in one
line (exit 2), ``--responses`` as the alias it now is."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import turnfsm
import turnfsm.adapters.llm as llm_package
from turnfsm.cli import build_parser, main
from turnfsm.cli._errors import CLIError
from turnfsm.cli._providers import PROVIDERS, Provider, open_provider

TESTS = Path(__file__).resolve().parents[1]
for _folder in ("anthropic", "openai"):  # their loopback servers and bodies, by name
    if str(TESTS / _folder) not in sys.path:
        sys.path.append(str(TESTS / _folder))

from anthropic_corpus import lines  # noqa: E402
from anthropic_loopback import LoopbackServer, Reply, error_body  # noqa: E402
from kit import (  # noqa: E402
    SWEEP,
    Served,
    first_by_default,
    refusing_port,
    serve_in_process,
)
from openai_loopback import LoopbackServer as OpenAILoopback  # noqa: E402
from openai_loopback import Reply as OpenAIReply  # noqa: E402
from openai_samples import ResponsesStream, text_stream  # noqa: E402

TURNFSM = str(Path(sys.executable).parent / "turnfsm")
KEY = "sk-ant-cli-test-0123456789"
CLAUDE = PROVIDERS["anthropic"].default_model


@pytest.fixture
def claude() -> Iterator[LoopbackServer]:
    """A Messages API server on 127.0.0.1 (ephemeral port)."""
    with LoopbackServer() as server:
        yield server
    assert not server.errors, server.errors


def run(cwd: Path, *argv: str, env: dict[str, str] | None = None, stdin: str = "") -> Ran:
    """``turnfsm ARGV...`` as the script runs it (``turnfsm.cli.main``), in this
    process: the environment a fresh process would get (``ENV``'s filter over
    this one's, plus ``env``), working directory ``cwd``, ``stdin`` as its
    input; each restored after. A fresh interpreter of its own is
    ``run_process``'s (an import made impossible by ``sitecustomize``)."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_stdin = sys.stdin
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update({**_inherited(saved_env), **(env or {})})
    os.chdir(cwd)
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Ran(code, out.getvalue(), err.getvalue())


PACKAGE_ROOT = str(Path(turnfsm.__file__).resolve().parents[1])
"""The folder holding the ``turnfsm`` package under test: a ``turnfsm`` process
gets it as its one ``PYTHONPATH`` entry, so that it runs the code under test,
not whatever tree the package is installed from, and nothing else of the
test's own path."""


PROVIDER_VARS = ("TURNFSM_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")
"""The prefixes of the variables a test's ``turnfsm`` does not inherit: it
gets those the test gives it, as a user's shell would set them."""


def _inherited(environ: dict[str, str]) -> dict[str, str]:
    kept = {k: v for k, v in environ.items() if not k.startswith(PROVIDER_VARS)}
    return {**kept, "PYTHONPATH": PACKAGE_ROOT}


ENV = _inherited(dict(os.environ))


def run_process(cwd: Path, *argv: str, env: dict[str, str] | None = None, stdin: str = "") -> Ran:
    """``turnfsm ARGV...`` as a process of its own: exit code, stdout, stderr."""
    done = subprocess.run(
        [TURNFSM, *argv],
        cwd=cwd,
        env={**ENV, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


class Ran:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def one_line(self) -> str:
        """The single stderr line (asserting there is exactly one, and no traceback)."""
        assert "Traceback" not in self.err, self.err
        assert self.err.count("\n") == 1 and self.err.endswith("\n"), self.err
        return self.err.rstrip("\n")


def _start(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [TURNFSM, *argv],
        cwd=cwd,
        env={**ENV, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    """Stop the process (SIGINT, then kill); its standard error."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.communicate()[1]


@contextlib.contextmanager
def _serving(*argv: str, env: dict[str, str]) -> Iterator[Served]:
    """``turnfsm serve --port 0 ARGV`` run by ``turnfsm.cli.main`` in this
    process (``serve_in_process``), with the provider variables a fresh
    process would get (``ENV``'s filter over this one's, plus ``env``): what
    is checked is the command's banner and answers, not its process, so it
    costs no interpreter of its own. On leaving it is stopped as SIGTERM
    stops it and must exit 0."""
    dropped = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(PROVIDER_VARS)}
    try:
        with serve_in_process("--port", "0", *argv, env=env) as served:
            yield served
    finally:
        os.environ.update(dropped)


def _auth(headers: dict[str, str]) -> str:
    """The credentials a request carried (the SDK sends the key as it chooses)."""
    return headers.get("x-api-key", "") + headers.get("authorization", "")


def _blocking(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment whose interpreter cannot import ``module``, as when it is
    not installed: a ``sitecustomize`` sets ``sys.modules[module] = None``,
    Python's own way to make ``import module`` raise ``ModuleNotFoundError``."""
    site = tmp_path / "blocked"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), PACKAGE_ROOT])}


def test_a_turnfsm_process_runs_the_code_under_test(tmp_path: Path) -> None:
    """The environment of the ``turnfsm`` processes (``ENV``) imports the
    package under test, not the tree it is installed from."""
    done = subprocess.run(
        [sys.executable, "-c", "import turnfsm; print(turnfsm.__file__)"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == Path(turnfsm.__file__).resolve()


# ---------------------------------------------------------------------- Claude, by hand


def test_chat_with_claude_answers_with_the_replayed_text(
    tmp_path: Path, claude: LoopbackServer
) -> None:
    claude.script(Reply(chunks=lines("basic_response.txt")))
    ran = run(
        tmp_path, "chat", "--provider", "anthropic", "--base-url", claude.url,
        "--store", "sqlite:///chats.db",
        env={"ANTHROPIC_API_KEY": KEY}, stdin="Hello, who are you?\n",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    opening, *rest = ran.out.splitlines()
    # the opening line names the provider, the model a context sends and where
    assert opening.startswith("context ") and f"; anthropic {CLAUDE} at {claude.url} " in opening
    assert "assistant> Hello there!" in rest
    (request,) = claude.requests
    assert request.path == "/v1/messages"
    assert request.body["model"] == CLAUDE and request.body["stream"] is True
    assert request.body["messages"][-1]["content"][0]["text"] == "Hello, who are you?"
    assert KEY in _auth(request.headers)


@SWEEP
def test_the_base_url_variable_and_the_flag_that_wins_over_it(
    tmp_path: Path, claude: LoopbackServer
) -> None:
    claude.script(*(Reply(chunks=lines("basic_response.txt")) for _ in range(2)))
    # ANTHROPIC_BASE_URL (the SDK's variable) is an endpoint: no key needed
    ran = run(
        tmp_path, "chat", "--provider", "anthropic", "-m", "hi", "--store", "memory://",
        "--model", "claude-opus-4-7", env={"ANTHROPIC_BASE_URL": claude.url},
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert "assistant> Hello there!" in ran.out
    # --base-url wins over the variable, which names a port nothing listens on
    with refusing_port() as dead:
        ran = run(
            tmp_path, "chat", "--provider", "anthropic", "-m", "hi", "--store", "memory://",
            "--base-url", claude.url, env={"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{dead}"},
        )  # fmt: skip
    assert ran.code == 0, ran.err
    assert [r.body["model"] for r in claude.requests] == ["claude-opus-4-7", CLAUDE]
    assert all("not-needed" in _auth(r.headers) for r in claude.requests)  # the placeholder


def _posted_turn(url: str) -> tuple[httpx.Response, httpx.Response]:
    """A context made with a system prompt on the server at ``url``, and a
    turn posted to it and waited for: the two responses."""
    created = httpx.post(f"{url}/api/contexts", json={"system_prompt": "Be brief."})
    cid = created.json()["id"]
    turn = httpx.post(
        f"{url}/api/contexts/{cid}/messages?wait=true", json={"content": "Hi!"}, timeout=60
    )
    return created, turn


@SWEEP  # serve: test_serve_with_gemini_answers_a_posted_turn
def test_serve_with_claude_answers_a_posted_turn(tmp_path: Path, claude: LoopbackServer) -> None:
    claude.script(Reply(chunks=lines("basic_response.txt")))
    with _serving(
        "--provider", "anthropic", "--base-url", claude.url,
        "--store", f"sqlite:///{tmp_path / 'serve.db'}", env={"ANTHROPIC_API_KEY": KEY},
    ) as served:  # fmt: skip
        created, turn = _posted_turn(served.url)
    err = served.said()
    assert created.status_code == 201, created.text
    assert created.json()["model"] == CLAUDE  # a new context's model: the provider's default
    assert turn.status_code == 200, turn.text
    assert turn.json()["text"] == "Hello there!"
    assert err.startswith(
        f"turnfsm serve: http://127.0.0.1:0, model {CLAUDE} (anthropic at {claude.url}), store "
    ), err
    assert f"turnfsm serve: listening on {served.url}\n" in err, err
    (request,) = claude.requests
    assert request.body["model"] == CLAUDE
    assert [b["text"] for b in request.body["system"]] == ["Be brief."]
    assert request.body["messages"][0]["content"][0]["text"] == "Hi!"


@SWEEP
def test_a_worker_names_its_model_by_provider(tmp_path: Path, claude: LoopbackServer) -> None:
    proc = _start(
        tmp_path, "worker", "--provider", "anthropic", "--base-url", claude.url,
        "--store", "sqlite:///work.db",
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert started.startswith("turnfsm worker: "), started + err
    assert started.rstrip().endswith(f", model {CLAUDE} (anthropic at {claude.url})"), started
    assert proc.returncode == 0, err


@SWEEP
def test_record_talks_to_claude(tmp_path: Path, claude: LoopbackServer) -> None:
    claude.script(Reply(chunks=lines("basic_response.txt")))
    ran = run(
        tmp_path, "record", "--out", "claude.json", "-m", "Hello",
        "--provider", "anthropic", "--base-url", claude.url,
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert "assistant> Hello there!" in ran.out
    script = json.loads((tmp_path / "claude.json").read_text())
    assert script["config"]["model"] == CLAUDE
    assert len(claude.requests) == 1


@SWEEP
def test_a_stored_conversation_moves_from_openai_to_claude(
    tmp_path: Path, claude: LoopbackServer
) -> None:
    with OpenAILoopback() as server:
        server.script(OpenAIReply(events=text_stream(["Nice to meet ", "you, Ada."])))
        first = run(
            tmp_path, "chat", "--base-url", server.url, "-m", "I am Ada.", "--json",
            "--store", "sqlite:///chats.db",
        )  # fmt: skip
    assert first.code == 0, first.err
    cid = json.loads(first.out)["context_id"]
    claude.script(Reply(chunks=lines("basic_response.txt")))
    ran = run(
        tmp_path, "chat", "--context", cid, "--provider", "anthropic", "--model", CLAUDE,
        "--base-url", claude.url, "-m", "Who am I?", "--store", "sqlite:///chats.db",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert f"resumed context {cid}: 2 messages, " in ran.out
    assert f"; anthropic {CLAUDE} at {claude.url}" in ran.out
    (request,) = claude.requests
    assert request.body["model"] == CLAUDE
    said = [(m["role"], [b["text"] for b in m["content"]]) for m in request.body["messages"]]
    assert said == [
        ("user", ["I am Ada."]),
        ("assistant", ["Nice to meet you, Ada."]),
        ("user", ["Who am I?"]),
    ]


# ---------------------------------------------------------------------- setup problems


COMMANDS = [
    ["chat", "-m", "hi"],
    ["record", "--out", "x.json", "-m", "hi"],
    ["resume", "some-id", "--store", "sqlite:///none.db"],
    ["recover", "--store", "sqlite:///none.db"],
    ["serve", "--port", "0", "--store", "memory://"],
    ["worker", "--store", "sqlite:///w.db"],
    ["temporal-worker", "--temporal", "127.0.0.1:9", "--store", "sqlite:///t.db"],
]


@pytest.mark.parametrize("argv", first_by_default(COMMANDS, [a[0] for a in COMMANDS]))
def test_a_missing_key_is_one_line_naming_the_variable(tmp_path: Path, argv: list[str]) -> None:
    ran = run(tmp_path, *argv, "--provider", "anthropic")
    assert ran.code == 2, ran.err
    assert ran.one_line() == (
        f"turnfsm {argv[0]}: no ANTHROPIC_API_KEY is set and no --base-url was given"
    )
    assert not list(tmp_path.glob("*.db"))  # said before any store is made


@pytest.mark.parametrize("command", first_by_default(["worker", "serve"], ["worker", "serve"]))
def test_a_model_named_without_a_key_or_endpoint_is_one_line(tmp_path: Path, command: str) -> None:
    # not the OpenAI API with a placeholder key, refused at the first turn
    argv = ["--port", "0"] if command == "serve" else []
    ran = run(tmp_path, command, *argv, "--model", "llama3.2", "--store", "sqlite:///s.db")
    assert ran.code == 2
    assert ran.one_line() == (
        f"turnfsm {command}: no OPENAI_API_KEY is set and no --base-url was given"
    )


def test_a_missing_gemini_key_names_both_variables(tmp_path: Path) -> None:
    ran = run(tmp_path, "chat", "--provider", "google", "-m", "hi")
    assert ran.code == 2
    line = ran.one_line()
    assert "GEMINI_API_KEY" in line and "GOOGLE_API_KEY" in line, line


@pytest.mark.parametrize("command", first_by_default(["chat", "serve"], ["chat", "serve"]))
def test_a_missing_extra_is_one_line_naming_it(
    tmp_path: Path, claude: LoopbackServer, command: str
) -> None:
    argv = ["-m", "hi"] if command == "chat" else ["--port", "0"]
    ran = run_process(
        tmp_path, command, *argv, "--provider", "anthropic", "--base-url", claude.url,
        "--store", "memory://", env=_blocking(tmp_path, "anthropic"),
    )  # fmt: skip
    assert ran.code == 2
    assert ran.one_line() == (
        f"turnfsm {command}: --provider anthropic needs the anthropic extra (anthropic is "
        "not installed): pip install 'turnfsm[anthropic]'"
    )
    assert claude.requests == []


def test_a_refused_key_names_the_providers_variable(tmp_path: Path, claude: LoopbackServer) -> None:
    claude.script(Reply(status=401, body=error_body("authentication_error", "invalid x-api-key")))
    ran = run(
        tmp_path, "chat", "--provider", "anthropic", "--base-url", claude.url,
        "-m", "hi", "--store", "memory://", env={"ANTHROPIC_API_KEY": KEY},
    )  # fmt: skip
    assert ran.code == 2
    line = ran.one_line()
    assert line.startswith(f"turnfsm chat: {claude.url} refused the API key ("), line
    assert line.endswith("; check ANTHROPIC_API_KEY (or --base-url)"), line
    assert KEY not in line


@pytest.mark.parametrize(
    ("argv", "said"),
    first_by_default(
        [
            (
                ["chat", "--responses", "--provider", "anthropic", "-m", "hi"],
                "--responses is --provider openai-responses, and --provider anthropic was given "
                "too: give one",
            ),
            (
                ["serve", "--port", "0", "--responses", "--provider", "openai"],
                "--responses is --provider openai-responses, and --provider openai was given "
                "too: give one",
            ),
            (
                ["chat", "--demo", "--provider", "anthropic", "-m", "hi"],
                "--demo and --provider anthropic name two models: give one",
            ),
            (
                ["record", "--out", "x.json", "--demo", "--responses", "-m", "hi"],
                "--demo and --provider openai-responses name two models: give one",
            ),
            (
                [
                    "worker",
                    "--llm",
                    "app:Model",
                    "--provider",
                    "google",
                    "--store",
                    "sqlite:///w.db",
                ],
                "--llm and --provider google name two models: give one",
            ),
            (
                [
                    "chat",
                    "--provider",
                    "anthropic",
                    "--no-stream",
                    "--base-url",
                    "http://h",
                    "-m",
                    "x",
                ],
                "--no-stream: the anthropic provider always streams",
            ),
        ],
        ["responses-anthropic", "responses-openai", "demo", "record-demo", "llm", "no-stream"],
    ),
)
def test_options_that_disagree_are_one_line(tmp_path: Path, argv: list[str], said: str) -> None:
    ran = run(tmp_path, *argv)
    assert ran.code == 2
    assert ran.one_line() == f"turnfsm {argv[0]}: {said}"
    assert not list(tmp_path.glob("*.db"))


# ---------------------------------------------------------------------- --responses


@pytest.mark.parametrize(
    "flags",
    first_by_default(
        [
            ["--responses"],
            ["--provider", "openai-responses"],
            ["--responses", "--provider", "openai-responses"],
        ],
        ["alias", "provider", "both"],
    ),
)
def test_responses_is_an_alias_of_the_provider(tmp_path: Path, flags: list[str]) -> None:
    with OpenAILoopback() as server:
        server.script(
            OpenAIReply(events=ResponsesStream().text(["Via ", "responses."]).completed())
        )
        ran = run(
            tmp_path, "chat", *flags, "--base-url", server.url, "-m", "Hi", "--json",
            "--store", "memory://",
        )  # fmt: skip
        paths = [r.path for r in server.requests]
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["text"] == "Via responses."
    assert paths == ["/v1/responses"]


def test_openai_stays_the_default(tmp_path: Path) -> None:
    with OpenAILoopback() as server:
        server.script(OpenAIReply(events=text_stream(["Chat ", "completions."])))
        ran = run(tmp_path, "chat", "--base-url", server.url, "-m", "Hi", "--store", "memory://")
        paths = [r.path for r in server.requests]
        model = server.requests[0].body["model"]
    assert ran.code == 0, ran.err
    assert f"; openai {PROVIDERS['openai'].default_model} at {server.url}" in ran.out
    assert paths == ["/v1/chat/completions"] and model == PROVIDERS["openai"].default_model


# ---------------------------------------------------------------------- the table


def test_every_command_that_runs_a_model_takes_every_provider() -> None:
    parser = build_parser()
    commands = {
        "chat": [], "record": ["--out", "x.json"], "resume": ["some-id"], "recover": [],
        "serve": [], "worker": [], "temporal-worker": ["--temporal", "127.0.0.1:9"],
    }  # fmt: skip
    for name in PROVIDERS:
        for command, more in commands.items():
            assert parser.parse_args([command, "--provider", name, *more]).provider == name


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_help_says_each_providers_key_extra_and_default_model(tmp_path: Path, command: str) -> None:
    ran = run(tmp_path, command, "--help", env={"COLUMNS": "2000"})  # no line is wrapped
    assert ran.code == 0, ran.err
    for p in PROVIDERS.values():
        keys = ", else ".join(f"${var}" for var in p.key_vars)
        extra = f", extra {p.extra})" if p.extra else ")"
        assert f"{p.name}: {p.what} ({keys}{extra}" in ran.out
        assert f"{p.default_model} for " in ran.out
        if p.base_url_var:
            assert f"${p.base_url_var} for " in ran.out
    assert "the flag wins over the variable" in ran.out


def test_an_adapter_missing_from_this_turnfsm_is_one_line() -> None:
    entry = Provider(
        name="elsewhere",
        what="a provider whose adapter is not here",
        adapter="turnfsm.adapters.llm:NoSuchLLM",
        sdk="no_such_sdk",
        extra="elsewhere",
        key_vars=("ELSEWHERE_API_KEY",),
        base_url_var=None,
        default_model="m",
        make=lambda cls, c: cls(),
    )
    with pytest.raises(CLIError) as caught:
        open_provider(entry, base_url="http://127.0.0.1:9", model=None, timeout=1.0)
    assert str(caught.value) == (
        "--provider elsewhere: its adapter, turnfsm.adapters.llm.NoSuchLLM, is not in this "
        "version of turnfsm"
    )


# ---------------------------------------------------------------------- Gemini

GEMINI = PROVIDERS["google"].default_model
GEMINI_KEY = "gemini-cli-test-0123456789"
HAS_GEMINI_ADAPTER = "GeminiLLM" in llm_package.__all__


def _gemini_answer(pieces: list[str]) -> list[bytes]:
    """A streamed ``generateContent`` answer (``alt=sse``) in the documented
    shape: one ``data:`` event per piece of text, the last with its
    ``finishReason`` and the usage."""
    events = []
    for n, piece in enumerate(pieces):
        candidate: dict[str, object] = {
            "content": {"parts": [{"text": piece}], "role": "model"},
            "index": 0,
        }
        if n == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
        event = {
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": 9,
                "candidatesTokenCount": n + 1,
                "totalTokenCount": 10 + n,
            },
            "modelVersion": GEMINI,
            "responseId": "gemini-cli-1",
        }
        events.append(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
    return events


@pytest.fixture
def gemini() -> Iterator[LoopbackServer]:
    """A loopback server for Gemini's streamed answers; the test is skipped
    while ``turnfsm.adapters.llm.GeminiLLM`` (or its SDK) is not installed."""
    try:
        from turnfsm.adapters.llm import GeminiLLM  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"GeminiLLM is not available here: {exc}")
    with LoopbackServer() as server:
        yield server
    assert not server.errors, server.errors


def test_chat_with_gemini_answers_with_the_replayed_text(
    tmp_path: Path, gemini: LoopbackServer
) -> None:
    gemini.script(Reply(chunks=_gemini_answer(["Hello", " from Gemini!"])))
    ran = run(
        tmp_path, "chat", "--provider", "google", "--base-url", gemini.url,
        "--store", "sqlite:///chats.db",
        env={"GEMINI_API_KEY": GEMINI_KEY}, stdin="Hello, who are you?\n",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    opening, *rest = ran.out.splitlines()
    assert f"; google {GEMINI} at " in opening
    assert "assistant> Hello from Gemini!" in rest
    (request,) = gemini.requests
    assert f"models/{GEMINI}:streamGenerateContent" in request.path
    assert request.headers.get("x-goog-api-key") == GEMINI_KEY
    assert "Hello, who are you?" in json.dumps(request.body["contents"])


def test_serve_with_gemini_answers_a_posted_turn(tmp_path: Path, gemini: LoopbackServer) -> None:
    gemini.script(Reply(chunks=_gemini_answer(["Hello", " from Gemini!"])))
    with _serving(
        "--provider", "google", "--base-url", gemini.url,
        "--store", f"sqlite:///{tmp_path / 'serve.db'}", env={"GOOGLE_API_KEY": GEMINI_KEY},
    ) as served:  # fmt: skip
        _, turn = _posted_turn(served.url)
    err = served.said()
    assert turn.status_code == 200, turn.text
    assert turn.json()["text"] == "Hello from Gemini!"
    assert err.startswith(f"turnfsm serve: http://127.0.0.1:0, model {GEMINI} (google"), err
    assert f"turnfsm serve: listening on {served.url}\n" in err, err
    (request,) = gemini.requests
    assert f"models/{GEMINI}:streamGenerateContent" in request.path
    assert request.headers.get("x-goog-api-key") == GEMINI_KEY


@pytest.mark.skipif(not HAS_GEMINI_ADAPTER, reason="turnfsm.adapters.llm has no GeminiLLM")
def test_a_missing_google_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    ran = run_process(
        tmp_path, "chat", "--provider", "google", "--base-url", "http://127.0.0.1:9",
        "-m", "hi", "--store", "memory://", env=_blocking(tmp_path, "google.genai"),
    )  # fmt: skip
    assert ran.code == 2
    assert ran.one_line() == (
        "turnfsm chat: --provider google needs the google extra (google.genai is not "
        "installed): pip install 'turnfsm[google]'"
    )


@pytest.mark.skipif(HAS_GEMINI_ADAPTER, reason="turnfsm.adapters.llm has GeminiLLM")
def test_google_without_its_adapter_is_one_line(tmp_path: Path) -> None:
    ran = run(
        tmp_path, "chat", "--provider", "google", "--base-url", "http://127.0.0.1:9",
        "-m", "hi", "--store", "memory://",
    )  # fmt: skip
    assert ran.code == 2
    assert ran.one_line() == (
        "turnfsm chat: --provider google: its adapter, turnfsm.adapters.llm.GeminiLLM, is not "
        "in this version of turnfsm"
    )
