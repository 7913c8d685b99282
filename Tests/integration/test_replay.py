"""`bgpolicy replay` (Docs/Replay.md): a small synthetic trace whose
figures are worked out by hand, and the StudentLife traces, converted at test time by
scripts/studentlife-trace.py from ../shared/traces/studentlife, where issue 5's targets are
checked against periodic:60m.

Its exact --help text is checked with the others in test_agent.py (HELP_COMMANDS). Needs no
bus: replay runs offline. The binary comes from $BGPOLICY_BUILD_DIR (conftest.py).
"""

import csv
import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, find_bin_dir

def find_studentlife():
    """The shared StudentLife file: $BGPOLICY_SHARED_DIR, else ../shared next to the repository
    (the developers' layout), else /work/shared (where this workplace keeps it for CI's clones,
    which may live anywhere)."""
    relative = Path("traces") / "studentlife" / "running_app_u00_u01_u02.csv"
    roots = [Path(os.environ["BGPOLICY_SHARED_DIR"])] if os.environ.get("BGPOLICY_SHARED_DIR") else []
    roots += [ROOT.parent / "shared", Path("/work/shared")]
    for root in roots:
        if (root / relative).is_file():
            return root / relative
    return roots[0] / relative


STUDENTLIFE = find_studentlife()
CONVERTER = ROOT / "scripts" / "studentlife-trace.py"
KEYS = ["wakeups_per_day", "refreshes_per_day", "freshness_5m", "freshness_15m",
        "median_staleness_s", "wasted_fraction"]


def bgpolicy():
    path = find_bin_dir() / "bgpolicy"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it first (swift build --product bgpolicy)")
    return path


_figures = {}


def replay(trace, policy, *extra):
    key = (str(trace), policy, extra)
    if key not in _figures:
        _figures[key] = _replay(trace, policy, *extra)
    return _figures[key]


def _replay(trace, policy, *extra):
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), "--policy", policy, "--json", *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert list(figures) == KEYS
    return figures


# --- A synthetic trace with a known answer ---------------------------------------------------
# The same trace as Tests/BGPolicyCoreTests/ReplayMetricsTests.swift; D is 7 days after its start.
D = 7 * 86400
SYNTHETIC = f"""timestamp,app_id,event
0,a,open
60.5,a,close
{D + 1000},a,open
{D + 1100},a,close
{D + 4000},b,open
{D + 4100},b,close
{D + 7300},a,open
{D + 86400},b,close
"""


@pytest.fixture
def synthetic(tmp_path):
    path = tmp_path / "synthetic.csv"
    path.write_text(SYNTHETIC)
    return path


@pytest.mark.parametrize("policy,expected", [
    ("periodic:60m", [25, 50, 1 / 3, 2 / 3, 400, 47 / 50]),
    ("oracle:10m", [3, 3, 0, 1, 600, 0]),
])
def test_synthetic_trace_has_the_worked_answer(synthetic, policy, expected):
    figures = replay(synthetic, policy)
    assert [figures[k] for k in KEYS] == pytest.approx(expected)


def test_oracle_takes_its_definition_literally_for_opens_closer_than_its_lead(tmp_path):
    # Docs/Replay.md, "Baselines": the open at D+1100 has its refresh at D+500, before the open
    # at D+1000, whose own refresh at D+400 is replaced unused. The scored span is 100 s.
    path = tmp_path / "close.csv"
    path.write_text(f"timestamp,app_id,event\n0,a,open\n{D + 1000},a,open\n{D + 1100},a,open\n")
    figures = replay(path, "oracle:10m")
    per_day = 2 * 86400 / 1100
    assert [figures[k] for k in KEYS] == pytest.approx([per_day, per_day, 0, 1, 550, 0.5])


def test_refreshes_file_lists_every_refresh(synthetic, tmp_path):
    # oracle:10m refreshes 10 min before every open; the open at 0 has none (a replay starts at
    # the first event). The figures on standard output are unchanged by the option.
    out = tmp_path / "refreshes.csv"
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--policy", "oracle:10m", "--json",
                        "--refreshes", str(out)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == replay(synthetic, "oracle:10m")
    assert out.read_text().splitlines() == [
        "timestamp,app_id", f"{D + 400},a", f"{D + 3400},b", f"{D + 6700},a"]
    # periodic:60m: every app of the trace on the hour, as many lines as refreshes_per_day says.
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--policy", "periodic:60m",
                        "--refreshes", str(out)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    rows = [line.split(",") for line in out.read_text().splitlines()[1:]]
    assert rows and all(int(t) % 3600 == 0 and app in ("a", "b") for t, app in rows)
    # A file that cannot be written: exit 73 and a message, nothing on standard output.
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--refreshes", str(tmp_path / "no" / "x")],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 73 and r.stdout == "", (r.returncode, r.stdout)
    assert "cannot write" in r.stderr and "No such file or directory" in r.stderr, r.stderr
    # A file that fills up as it is written (the refreshes go out as they are made): the same.
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--policy", "periodic:1min",
                        "--refreshes", "/dev/full"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 73 and r.stdout == "", (r.returncode, r.stdout)
    assert "cannot write /dev/full" in r.stderr and "No space left on device" in r.stderr, r.stderr
    # The trace itself, however it is spelled: refused as a usage error, with replay's usage
    # line (it was bgpolicy's, "Usage: bgpolicy <subcommand>", when found in run()), and the
    # trace is kept.
    copy = tmp_path / "trace.csv"
    copy.write_bytes(synthetic.read_bytes())
    (tmp_path / "link.csv").symlink_to(copy)
    for name in (str(copy), f"{tmp_path}/./trace.csv", str(tmp_path / "link.csv")):
        r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(copy), "--refreshes", name],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 64 and r.stdout == "", (r.returncode, r.stdout)
        assert r.stderr.startswith("Error: --refreshes names the trace itself"), r.stderr
        assert "\nUsage: bgpolicy replay --trace <file>" in r.stderr, r.stderr
        assert copy.read_bytes() == synthetic.read_bytes(), "the trace was overwritten"


def test_refreshes_file_quotes_app_ids_as_the_trace_may(tmp_path):
    """The trace may quote an app id holding a comma or a double quote (RFC 4180); the
    refreshes were written without quotes, so such a line read as three fields, or a quote
    opened and never closed. Read back as CSV, the file has every app id as the trace had it."""
    apps = ["org.example.A,B", 'say "hi"', "plain", ' "lead', "cr\rin"]
    fields = ['"' + app.replace('"', '""') + '"' for app in apps]
    rows = ["timestamp,app_id,event"] + [f"{i},{field},open" for i, field in enumerate(fields)]
    rows += [f"{D + 1000 + i},{field},open" for i, field in enumerate(fields)]
    trace = tmp_path / "quoted.csv"
    trace.write_text("\n".join(rows) + "\n", newline="")
    out = tmp_path / "refreshes.csv"
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), "--policy", "oracle:10m",
                        "--refreshes", str(out)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    with open(out, newline="") as f:
        read = list(csv.reader(f))
    assert read == [["timestamp", "app_id"]] + [[str(D + 400 + i), app] for i, app in enumerate(apps)], read


CEILING = ROOT / "scripts" / "after-use-ceiling.py"


def test_after_use_ceiling_script_has_the_worked_answer(tmp_path):
    """scripts/after-use-ceiling.py (Docs/Replay.md quotes it): every close refreshes its app a
    second later unless it was refreshed in the last 15 min. Each day the app is opened at
    10:00, 10:10 and 10:30 and left at 10:05, 10:18 and 10:31: the refresh at 10:05:01 serves
    10:10; the one at 10:18:01, which would serve 10:30, is refused (13 min after the last), so
    10:30 is 25 min stale; the one at 10:31:01 is a day old by 10:00. On the scored day (the
    8th), 1 open in 3 is fresh."""
    rows = ["timestamp,app_id,event"]
    for day in range(8):
        t = day * 86400 + 10 * 3600
        rows += [f"{t},a,open", f"{t + 300},a,close", f"{t + 600},a,open", f"{t + 1080},a,close",
                 f"{t + 1800},a,open", f"{t + 1860},a,close"]
    trace = tmp_path / "day.csv"
    trace.write_text("\n".join(rows) + "\n")

    def freshness(*options):
        r = subprocess.run([str(CEILING), str(trace), *options], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"{trace}: freshness_15m "), r.stdout
        return float(r.stdout.split("freshness_15m ")[1].split(",")[0])

    assert freshness() == pytest.approx(1 / 3, abs=0.001)
    # With no refresh allowed, nothing is fresh; the baseline comes from bgpolicy itself.
    assert freshness("--max-wakes-per-day", "0") == 0
    r = subprocess.run([str(CEILING), str(trace), "--bgpolicy", str(bgpolicy())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    periodic = replay(trace, "periodic:60m")["freshness_15m"]
    assert f"periodic:60m {periodic:.3f}, {1 / 3 / periodic:.2f}x" in r.stdout, r.stdout


@pytest.mark.parametrize("text,note", [
    ("timestamp,app_id,event\n", "the trace has no events, so every figure is 0"),
    ("timestamp,app_id,event\n0,a,open\n216000,a,open\n",
     "no open comes after the trace's first 7 days (it spans 2.5 days), and only those are scored, "
     "so every figure is 0"),
    # An open at exactly 7 days: the scored span is empty, so it is not scored either.
    ("timestamp,app_id,event\n0,a,open\n604800,a,open\n",
     "no open comes after the trace's first 7 days (it spans 7.0 days), and only those are scored, "
     "so every figure is 0"),
])
def test_a_trace_with_nothing_to_score_says_so(tmp_path, text, note):
    """Figures of 0 from a trace too short to score say nothing of the policy: a note on stderr
    says why, and the figures are still printed (exit 0)."""
    trace = tmp_path / "short.csv"
    trace.write_text(text)
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), "--json"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["freshness_15m"] == 0
    assert r.stderr == f"bgpolicy: note: {trace}: {note}\n"
    # After the figures, not before them: stdout, block-buffered to a pipe, is flushed first.
    table = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace)], capture_output=True, text=True,
                           timeout=20).stdout
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout == table + f"bgpolicy: note: {trace}: {note}\n", r.stdout


def test_quoted_fields_and_a_byte_order_mark_are_read(synthetic, tmp_path):
    """The synthetic trace as R's write.csv and a spreadsheet would write it: every text field in
    double quotes, a byte-order mark first, CRLF line ends. The figures are the same, and
    nothing is noted (every open after the first week is scored)."""
    rows = SYNTHETIC.strip().split("\n")
    quoted = ['"timestamp","app_id","event"'] + [
        f'{t},"{a}","{e}"' for t, a, e in (row.split(",") for row in rows[1:])]
    trace = tmp_path / "quoted.csv"
    trace.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(quoted).encode() + b"\r\n")
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), "--policy", "periodic:60m", "--json"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert json.loads(r.stdout) == replay(synthetic, "periodic:60m")


def test_table_names_every_figure(synthetic):
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--policy", "oracle:10m"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["METRIC", "oracle:10min"]
    assert [line.split()[0] for line in lines[1:]] == KEYS
    assert lines[4].split() == ["freshness_15m", "1.000"]


@pytest.mark.parametrize("text,status,message", [
    ("time,app,event\n", 65, "line 1: expected the header"),
    # An empty file is a trace without its header (65), not an empty name given as FILE (64).
    ("", 65, "line 1: the trace is empty"),
    ("timestamp,app_id,event\n5,a,open\n4,a,close\n", 65, "line 3: "),
    ("timestamp,app_id,event\n5,a,launch\n", 65, "line 2: event \"launch\""),
    # A digit too many in a trace's last line: an error at once, not a replay of 3,000 years.
    ("timestamp,app_id,event\n1700000000,a,open\n99999999999,a,close\n", 65, "line 3: timestamp \"99999999999\""),
    ("timestamp,app_id,event\n0x10,a,open\n", 65, "line 2: timestamp \"0x10\" is not Unix time in decimal seconds"),
    # The trace's text is quoted without its control characters: it cannot restyle the terminal.
    ("timestamp,app_id,event\n5,a,\x1b[2J\x1b[31mopen\n", 65, "line 2: event \"?[2J?[31mopen\""),
])
def test_bad_trace_names_the_line(tmp_path, text, status, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(path)], capture_output=True, text=True, timeout=20)
    assert r.returncode == status
    assert message in r.stderr, r.stderr
    assert "\x1b" not in r.stderr


def test_missing_trace_and_bad_policy(tmp_path):
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(tmp_path / "none.csv")],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 66
    assert "cannot read" in r.stderr
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", "x", "--policy", "cron:1h"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 64
    assert "unknown policy" in r.stderr
    # An empty name (a script's unset variable) is a usage error, as for --refreshes and
    # timeline --svg, not "cannot read : No such file or directory".
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", ""], capture_output=True, text=True, timeout=20)
    assert r.returncode == 64 and r.stdout == "", r
    assert r.stderr.startswith("Error: --trace needs the name of the file to read.\n"), r.stderr


def at_most_2_gib():
    """Without a bound on the trace, reading /dev/zero would take the machine's memory: this
    makes it fail instead. A replay within the bound needs far less."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("kind", ["/dev/zero", "endless fifo", "257 MiB file"])
def test_a_trace_over_256_mib_is_refused(tmp_path, kind):
    """A trace is read whole before it is parsed; one with no end, or a file too large to be a
    usage trace, is refused as unreadable (66) with the limit, not read until memory runs out."""
    writer = None
    if kind == "/dev/zero":
        path = "/dev/zero"
    elif kind == "endless fifo":
        path = tmp_path / "trace.fifo"
        os.mkfifo(path)
        writer = subprocess.Popen(["sh", "-c", 'exec yes 1,org.example.Feeds,open > "$0"', str(path)],
                                  stderr=subprocess.DEVNULL)
    else:
        path = tmp_path / "big.csv"
        with open(path, "w") as f:
            f.write("timestamp,app_id,event\n")
            f.truncate((256 << 20) + 1)
    try:
        r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(path)], capture_output=True, text=True,
                           timeout=60, preexec_fn=at_most_2_gib)
    finally:
        if writer:
            writer.kill()
            writer.wait()
    assert (r.returncode, r.stdout) == (66, ""), r
    assert r.stderr == f"bgpolicy: cannot read {path}: it is larger than 256 MiB, the most a trace may be\n", r.stderr


# --- StudentLife -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def studentlife(tmp_path_factory):
    if not STUDENTLIFE.is_file():
        pytest.fail(f"{STUDENTLIFE} is missing: set BGPOLICY_SHARED_DIR to the folder holding traces/studentlife")
    out = tmp_path_factory.mktemp("studentlife")
    subprocess.run(["/usr/bin/python3", str(CONVERTER), str(STUDENTLIFE), str(out), "--user", "00", "01", "02"],
                   check=True, timeout=120)
    return out


def test_converter_writes_one_sorted_trace_per_user(studentlife):
    for user in ["00", "01", "02"]:
        lines = (studentlife / f"studentlife-u{user}.csv").read_text().splitlines()
        assert lines[0] == "timestamp,app_id,event"
        rows = [line.split(",") for line in lines[1:]]
        times = [float(r[0]) for r in rows]
        assert times == sorted(times)
        assert {r[2] for r in rows} == {"open", "close"}
        apps = {r[1] for r in rows}
        assert not apps & {"com.android.launcher", "com.android.systemui", "com.android.phone", "org.bewellapp"}
        assert sum(r[2] == "open" for r in rows) > 300


@pytest.mark.parametrize("user", ["00", "01", "02"])
def test_every_trace_wakes_and_refreshes_less_than_hourly_timers(studentlife, user):
    trace = studentlife / f"studentlife-u{user}.csv"
    ours = replay(trace, "bgpolicy")
    hourly = replay(trace, "periodic:60m")
    assert ours["wakeups_per_day"] <= hourly["wakeups_per_day"]
    assert ours["refreshes_per_day"] <= 0.1 * hourly["refreshes_per_day"]


# Issue 5's freshness target, which names users 00 and 02: reached on user 02, not yet on user 00
# (Docs/Replay.md, "Where it stands"). User 00's figure is guarded against regressions, and its
# target kept as an expected failure so that reaching it shows. User 01 is no target of the issue;
# its figure is only guarded below.
@pytest.mark.parametrize("user", [
    "02",
    pytest.param("00", marks=pytest.mark.xfail(reason="issue 5 target not reached yet on user 00; see Docs/Replay.md",
                                               strict=True)),
])
def test_freshness_target(studentlife, user):
    trace = studentlife / f"studentlife-u{user}.csv"
    ours = replay(trace, "bgpolicy")
    hourly = replay(trace, "periodic:60m")
    assert ours["freshness_15m"] >= 1.5 * hourly["freshness_15m"]


def test_freshness_on_user_00_does_not_regress(studentlife):
    # 0.421 now (Docs/Replay.md); 0.374 before the user-level activity model.
    assert replay(studentlife / "studentlife-u00.csv", "bgpolicy")["freshness_15m"] >= 0.42


def test_freshness_on_user_01_does_not_regress(studentlife):
    # A guard, not issue 5's target (which names users 00 and 02): 0.475 now (Docs/Replay.md),
    # against periodic:60m's 0.445.
    assert replay(studentlife / "studentlife-u01.csv", "bgpolicy")["freshness_15m"] >= 0.47


def test_on_user_02_the_target_holds_with_apps_known_only_from_their_first_open(studentlife):
    # With --apps first-seen the policy is told nothing of the trace beyond its past, not even how
    # many apps will come (Docs/Replay.md, "What bgpolicy is told"): 0.335 against periodic:60m's
    # 0.213 (1.57×), with the bounds on wake-ups and refreshes kept. User 00: 0.397 (1.13×).
    trace = studentlife / "studentlife-u02.csv"
    ours = replay(trace, "bgpolicy", "--apps", "first-seen")
    hourly = replay(trace, "periodic:60m")
    assert ours["freshness_15m"] >= 1.5 * hourly["freshness_15m"], (ours, hourly)
    assert ours["wakeups_per_day"] <= hourly["wakeups_per_day"]
    assert ours["refreshes_per_day"] <= 0.1 * hourly["refreshes_per_day"]
    assert ours != replay(trace, "bgpolicy"), "--apps first-seen changed nothing"


def test_the_budget_knobs_trade_refreshes_for_freshness_on_user_00(studentlife, tmp_path):
    # Issue 5's two targets pull apart on user 00: 1.5x periodic:60m's freshness_15m is reached
    # with `[refresh] budget = 8` and `windows_per_day = 23` (0.529), within its wake-ups but at
    # about 23 % of its refreshes, not 10 % (Docs/Replay.md, "What the targets cost"). The same
    # file read by `replay --config` is what the agent would read.
    conf = tmp_path / "bgpolicy.conf"
    conf.write_text("[refresh]\nbudget = 8\nwindows_per_day = 23\n")
    trace = studentlife / "studentlife-u00.csv"
    richer = replay(trace, "bgpolicy", "--config", str(conf))
    ours = replay(trace, "bgpolicy")
    hourly = replay(trace, "periodic:60m")
    assert richer["freshness_15m"] >= 1.5 * hourly["freshness_15m"], (richer, hourly)
    assert richer["wakeups_per_day"] <= hourly["wakeups_per_day"]
    assert 0.2 * hourly["refreshes_per_day"] <= richer["refreshes_per_day"] <= 0.26 * hourly["refreshes_per_day"], richer
    # A file that sets the defaults replays as no file does.
    defaults = tmp_path / "defaults.conf"
    defaults.write_text("[refresh]\nbudget = 2.2\nwindows_per_day = 21\n")
    assert replay(trace, "bgpolicy", "--config", str(defaults)) == ours


def test_replay_config_errors_are_named(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,app_id,event\n1,a,open\n")

    def run(*extra):
        return subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), *extra],
                              capture_output=True, text=True, timeout=60)

    bad = tmp_path / "bad.conf"
    bad.write_text("[refresh]\nbudget = 2,5\n")
    r = run("--config", str(bad))
    assert (r.returncode, r.stdout) == (78, ""), r
    assert r.stderr == (f'bgpolicy: {bad}:2: [refresh] budget: expected a number from 0.1 to 96 with at most two '
                        'decimals, like "2.2", got "2,5" (the decimal separator is ".")\n'), r.stderr
    every = tmp_path / "every.conf"
    every.write_text("[refresh]\nstrategy = every-window\n")
    r = run("--config", str(every))
    assert r.returncode == 78 and "a replay plays the predicted strategy only" in r.stderr, r
    r = run("--config", str(tmp_path / "missing.conf"))
    assert r.returncode == 66 and "cannot read" in r.stderr and "No such file" in r.stderr, r
    r = run("--config", str(bad), "--policy", "periodic:60m")
    assert r.returncode == 64 and "--config is for --policy bgpolicy only" in r.stderr, r
    r = run("--config", "")
    assert r.returncode == 64 and "--config needs the name" in r.stderr, r


def refresh_lines(trace, *extra):
    out = trace.with_suffix(".refreshes-" + "-".join(extra or ("default",)) + ".csv")
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(trace), "--refreshes", str(out), *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [(int(t), app) for t, app in (line.split(",") for line in out.read_text().splitlines()[1:])]


def test_with_apps_first_seen_nothing_of_the_future_reaches_the_policy(tmp_path):
    # One app opened each morning for three weeks; the second trace adds 20 apps, each opened
    # once at the last instant. Known only from their opens, they can change nothing before it:
    # the refreshes before it are the same line for line. Told at the start (the default), the
    # 21 apps' budget is 21 times one app's, and the refreshes before differ: that is what
    # --apps names.
    day = 86400
    events = []
    for d in range(21):
        events += [(d * day + 8 * 3600, "a", "open"), (d * day + 8 * 3600 + 30, "a", "close")]
    last = events[-1][0] + 3600
    one = tmp_path / "one.csv"
    many = tmp_path / "many.csv"
    header = "timestamp,app_id,event\n"
    body = "".join(f"{t},{app},{kind}\n" for t, app, kind in events) + f"{last},a,open\n"
    one.write_text(header + body)
    many.write_text(header + body + "".join(f"{last},late{i:02},open\n" for i in range(20)))
    before = lambda lines: [line for line in lines if line[0] < last]
    seen_one = before(refresh_lines(one, "--apps", "first-seen"))
    assert seen_one, "no refresh of the daily app at all"
    assert seen_one == before(refresh_lines(many, "--apps", "first-seen"))
    assert before(refresh_lines(one)) != before(refresh_lines(many))


def test_apps_choice_is_checked(synthetic):
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--apps", "all"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 64 and r.stdout == "", r
    assert r.stderr.startswith("Error: --apps all: expected at-start or first-seen.\n"), r.stderr
    # The baselines are defined on every app of the trace: first-seen is refused for them.
    r = subprocess.run([str(bgpolicy()), "replay", "--trace", str(synthetic), "--policy", "periodic:60m",
                        "--apps", "first-seen"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 64 and r.stdout == "", r
    assert "--apps first-seen is for --policy bgpolicy only" in r.stderr, r.stderr
    assert replay(synthetic, "oracle:10m", "--apps", "at-start") == replay(synthetic, "oracle:10m")


# --- Desktop-like sessions -------------------------------------------------------------------
# scripts/desktop-trace.py: exact-time opens in work sessions (Docs/Replay.md). No finer-grained
# desktop trace is available here; this guards how the policy treats one.
DESKTOP = ROOT / "scripts" / "desktop-trace.py"


def desktop_trace(tmp_path_factory, *args):
    """A trace written by scripts/desktop-trace.py with `args`, in a temporary folder."""
    path = tmp_path_factory.mktemp("desktop") / "trace.csv"
    r = subprocess.run(["/usr/bin/python3", str(DESKTOP), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    path.write_text(r.stdout)
    return path


def replay_within_hourly_timers_budget(trace):
    """`bgpolicy` and `periodic:60m` on `trace`, once issue 5's bounds on every trace are
    checked: no more wake-ups than `periodic:60m`, a tenth of its refreshes."""
    ours = replay(trace, "bgpolicy")
    hourly = replay(trace, "periodic:60m")
    assert ours["wakeups_per_day"] <= hourly["wakeups_per_day"], (ours, hourly)
    assert ours["refreshes_per_day"] <= 0.1 * hourly["refreshes_per_day"], (ours, hourly)
    return ours, hourly


@pytest.fixture(scope="module")
def desktop(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "5")


def test_desktop_sessions_are_fresher_than_hourly_timers_with_a_tenth_of_the_refreshes(desktop):
    ours, hourly = replay_within_hourly_timers_budget(desktop)
    # 1.82× (0.451 against 0.248). 1.63× (0.405) before the window after use weighed its
    # refresh against what the planner's other refreshes paid (`refreshYield`) rather than the
    # app threshold alone, which in sessions climbs out of reach; with windows after opens alone
    # it scored 1.51×; before the app threshold, when it spent its budget one app at a time all
    # day, 0.93×.
    assert ours["freshness_15m"] >= 1.7 * hourly["freshness_15m"], (ours, hourly)


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "--sparse", "3")


def test_sparse_sessions_are_served_by_the_window_after_an_open(sparse):
    # Sessions of a few apps each opened once and kept open: apps are rarely reopened soon after
    # a close, and the next app of a session comes a few minutes after the last. The window
    # after an open serves there, with the apps the user is likely to go on to
    # (`FollowEstimator`): 1.45× periodic:60m (0.318 against 0.219). Ranked by the slot model
    # instead, whose chances at that moment were no higher than at any grid point, it scored
    # 0.71×; with windows after closes alone, 0.43× (Docs/Replay.md).
    ours, hourly = replay_within_hourly_timers_budget(sparse)
    assert ours["freshness_15m"] >= 1.3 * hourly["freshness_15m"], (ours, hourly)


# Most desktops have many apps installed and use a few: `--rare N` adds N apps opened 1–4 times
# over the trace. The budget grows with them (it is a share of `periodic`'s refreshes, and
# `periodic` refreshes every app of the trace), so wake-ups are what binds, not refreshes.
@pytest.fixture(scope="module")
def seldom10(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "--rare", "10", "8")


def test_many_apps_installed_do_not_wake_the_machine_more_than_hourly_timers(seldom10):
    # Seed 8 with 10 apps seldom used: 22.1 wake-ups a day against periodic:60m's 24.0. Before
    # every wake-up counted toward the planner's target (only whether a slot had one did), the
    # windows after opens and after use took the budget's room to 31.9 a day.
    ours, hourly = replay_within_hourly_timers_budget(seldom10)
    assert ours["freshness_15m"] >= 2.2 * hourly["freshness_15m"], (ours, hourly)


@pytest.fixture(scope="module")
def seldom10_three_weeks(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "--rare", "10", "7", "21")


def test_a_busy_fortnight_after_a_first_week_does_not_wake_the_machine_more_than_hourly_timers(
        seldom10_three_weeks):
    # Seed 7 over 21 days: its scored fortnight (days 7–21) is busier than its first week, and
    # the window threshold must climb through it. Each step it climbs costs a wake-up over the
    # target; started at 0.2 and let fall while the pool was empty, it woke 26.3 times a day
    # against periodic:60m's 24.0. Started at 0.4 and held then: 23.8 a day, 2.63×
    # (Docs/Replay.md, "Short traces").
    ours, hourly = replay_within_hourly_timers_budget(seldom10_three_weeks)
    assert ours["freshness_15m"] >= 2.4 * hourly["freshness_15m"], (ours, hourly)


def wake_ups(refreshes_csv):
    """The wake-ups among the refreshes `--refreshes` wrote, as replay counts them: a refresh
    more than 60 s after the first of the wake-up before starts a new one."""
    times = sorted(int(line.split(",")[0]) for line in refreshes_csv.read_text().splitlines()[1:])
    starts = []
    for t in times:
        if not starts or t > starts[-1] + 60:
            starts.append(t)
    return starts


def test_back_from_two_weeks_away_the_machine_does_not_wake_at_every_chance(seldom10, tmp_path):
    # Seed 8's first two weeks, then two weeks with no open at all, then its other three. While
    # the user was away, slots without a wake-up used to lower the window threshold a little
    # each (to a thousandth of where it stood), and it climbs back only a step per wake-up: the
    # first week back woke the machine 260 times (48 the first day). It now holds from 48
    # hours after the last open: 134 (Docs/Replay.md, "Short traces, and time away").
    lines = seldom10.read_text().splitlines()
    events = [line.split(",") for line in lines[1:]]
    start, gap = int(events[0][0]), 14 * 86400
    back = start + 14 * 86400 + gap
    trace = tmp_path / "away.csv"
    trace.write_text("\n".join([lines[0]] + [
        f"{int(t) + (gap if int(t) >= start + 14 * 86400 else 0)},{app},{kind}" for t, app, kind in events]) + "\n")
    out = tmp_path / "refreshes.csv"
    ours = replay(trace, "bgpolicy", "--refreshes", str(out))
    week_back = [w for w in wake_ups(out) if back <= w < back + 7 * 86400]
    assert len(week_back) <= 7 * 24, week_back
    assert ours["freshness_15m"] >= 0.45, ours


@pytest.fixture(scope="module")
def seldom30(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "--rare", "30", "5")


def test_with_many_apps_installed_the_desktop_targets_hold(seldom30):
    # Seed 5 with 30 apps seldom used: 2.62× periodic:60m and 66 % of oracle:10m, issue 5's
    # targets for desktop traces (2.5×, 60 %), at 21.2 wake-ups a day. Each window after an open
    # or after use that opens also takes what a grid window would (`chooseAlongside`); without
    # that, 2.26×.
    ours, hourly = replay_within_hourly_timers_budget(seldom30)
    oracle = replay(seldom30, "oracle:10m")
    assert ours["freshness_15m"] >= 2.5 * hourly["freshness_15m"], (ours, hourly)
    assert ours["freshness_15m"] >= 0.6 * oracle["freshness_15m"], (ours, oracle)


# `--routines`: habits at the same minutes each day rather than sessions (Docs/Replay.md).
@pytest.fixture(scope="module")
def routines(tmp_path_factory):
    return desktop_trace(tmp_path_factory, "--routines", "5")


def test_routines_are_learned_to_the_quarter_hour(routines):
    # Seed 5: each app opened at its own times of day, give or take 5 minutes. 3.54×
    # periodic:60m (0.662 against 0.187). Before each app's model had the slot of the day, its
    # hour smeared a routine over four slots and the budget went to the wrong ones: 1.88×; before
    # it had the same slot on past days, and a window could take two refreshes with fewer than
    # ten apps, 2.86× (0.536); before ForecastBlend weighed the rate of past days against the
    # model, 3.29× (0.617).
    ours, hourly = replay_within_hourly_timers_budget(routines)
    assert ours["freshness_15m"] >= 3.3 * hourly["freshness_15m"], (ours, hourly)
