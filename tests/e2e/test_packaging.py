"""The installers as a user gets them: build the PyInstaller bundle once, then unpack its archive elsewhere
and install its .deb into a throwaway root with dpkg, and run each bare.

The bundle runs from a folder the build never saw, with a clean environment (no virtualenv or pyenv on
PATH, no PYTHONPATH, HOME an empty folder), so it can only work if it carries its own Python, Qt,
llama.cpp and model. The .deb goes through dpkg itself (`dpkg --root`, no root rights needed): install,
verify, purge, as `apt install ./hearth_*.deb` and `apt purge hearth` would run it.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from app import __version__

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1500
# Qt modules Hearth never uses; any of them in the bundle means the excludes stopped working.
# (Qt6Network is used: the single-instance hand-over, app/ui/shell/single_instance.py.)
UNUSED_QT = ("WebEngine", "Qt6Qml", "Qt6Quick", "Qt63D", "Qt6Multimedia", "Qt6Pdf", "Qt6Designer", "Qt6Charts",
             "Qt6Sql")
# Heavy Python packages that optional imports would drag in. (cryptography is used: SecretStorage, the
# keyring's Secret Service backend, imports it; pydantic is used: the MCP SDK needs it.)
UNUSED_PACKAGES = ("torch", "transformers", "botocore", "openai", "hf_xet", "PIL", "fastapi", "trio", "hypothesis")
# 314 MB when measured, 98 MB of it the model, plus the Vulkan engine runtime (36 MB) where it is built, plus the
# documents' readers (#34: lxml for python-docx 10 MB, python-docx and pypdf 3 MB; 389 MB measured with fontTools'
# 7 MB, 380 MB since it is left out), plus the documents' embedding model (46 MB) where the convert extra made it:
# 431 MB measured with all of them. The MCP SDK's pydantic, pydantic_core and opentelemetry-api add 6 MB (393 ->
# 399 MB measured without the Vulkan runtime, so about 437 MB with it); room for a library update, not for a new
# dependency tree.
MAX_BUNDLE_MB = 450
APP_ID = "io.hearth.Hearth"


def bundle_test(func):
    """Slow (it needs the build, which the first such test pays for) and Linux-only: the CI builds that one."""
    for mark in (pytest.mark.timeout(BUILD_TIMEOUT_S + 600), pytest.mark.slow, pytest.mark.heavy,
                 pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CI builds the Linux bundle")):
        func = mark(func)
    return func


def clean_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_bundle(exe: Path, *args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=clean_env(home),
                          cwd=home, stdin=subprocess.DEVNULL)


@pytest.fixture
def home(tmp_path) -> Path:
    """An empty home folder for the bundle's clean environment."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Build dist/Hearth and its archive into a temporary folder; return that dist folder."""
    if importlib.util.find_spec("PyInstaller") is None:
        pytest.fail("PyInstaller is not installed: pip install -e '.[package]'")
    if shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is not installed: apt-get install dpkg")
    out = tmp_path_factory.mktemp("build")
    # One build for every test here: the folder, its archive and the .deb (uncompressed: the tests check what
    # it installs, and xz would add minutes).
    proc = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(out / "dist"),
                           "--work", str(out / "work"), "--deb", "--deb-compression", "none"],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(proc.stdout.strip())  # the bundle's size and build time, for the log
    return out / "dist"


@pytest.fixture(scope="module")
def unpacked(built, tmp_path_factory) -> Path:
    """The archive unpacked into a fresh folder, as a user would; returns the Hearth executable."""
    archives = list(built.glob(f"Hearth-{__version__}-linux-*.tar.gz"))
    assert len(archives) == 1, list(built.iterdir())
    target = tmp_path_factory.mktemp("installed")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(target, filter="tar")
    exe = target / "Hearth" / "Hearth"
    assert os.access(exe, os.X_OK)
    return exe


@bundle_test
def test_unpacked_bundle_passes_its_selftest_in_a_clean_environment(unpacked, home):
    proc = run_bundle(unpacked, "--selftest", home=home)
    report = proc.stdout
    print(report)
    assert proc.returncode == 0, report + proc.stderr[-3000:]
    assert report.rstrip().endswith("selftest passed")
    assert f"Hearth {__version__} selftest (frozen bundle" in report
    assert f"executable {unpacked}" in report
    # The model, the resources and the engine come from the unpacked folder, not from this checkout.
    bundle_dir = str(unpacked.parent)
    model_line = re.search(r"^ {2}ok {4}model +(.+)$", report, re.M)
    assert model_line and bundle_dir in model_line.group(1), report
    assert re.search(rf"^ {{2}}ok {{4}}resources +{re.escape(bundle_dir)}", report, re.M), report
    engine_line = re.search(r"^ {2}ok {4}engine +.*; (\d+) tokens at ([\d.]+) tok/s: (['\"]).+\3$", report, re.M)
    assert engine_line and int(engine_line.group(1)) > 0, report
    # libmtmd is in the bundle and opens beside its libllama (CI's bundle died on importing it, #53).
    assert re.search(r"^ {2}ok {4}media +libmtmd loads beside libllama", report, re.M), report
    gui_line = re.search(r"^ {2}ok {4}gui +main window \d+x\d+ painted offscreen in ([\d.]+) s", report, re.M)
    assert gui_line and float(gui_line.group(1)) < 60, report
    assert_serves_and_chats(report)
    assert_ships_the_vulkan_runtime(unpacked.parent, report)
    assert_ships_the_embedding_model(unpacked.parent, report)
    # No keyring service in this clean environment: the check passes with the sentence users are shown.
    assert re.search(r"^ {2}ok {4}keyring +no keyring service runs here .*kept only until Hearth closes", report,
                     re.M), report


def portable_vulkan_built() -> bool:
    from app.core.making import runtime_build
    return runtime_build.cached(runtime_build.BuildSpec(name="vulkan", portable=True)) is not None


def assert_ships_the_vulkan_runtime(install: Path, report: str) -> None:
    """#28: the bundle (and so the .deb) carries the portable Vulkan runtime where it was built (tests/run.sh
    builds it), each library once under the name the loader opens, and it loads from there against the
    system's Vulkan loader (lavapipe, a CPU, is listed as hidden)."""
    if not portable_vulkan_built():
        assert re.search(r"^ {2}ok {4}runtimes +no GPU runtime is shipped", report, re.M), report
        return
    shipped = list((install / "_internal" / "resources" / "runtimes").glob("vulkan-*"))
    assert len(shipped) == 1, shipped
    names = sorted(p.name for p in shipped[0].iterdir())
    assert "libllama.so" in names and "libggml-vulkan.so.0" in names and "hearth-runtime.json" in names, names
    assert not [n for n in names if re.search(r"\.so\.\d+\.\d+", n)], names  # no versioned copies
    assert re.search(r"^ {2}ok {4}runtimes +vulkan \(vulkan-[\w.-]+\) loads; devices: ", report, re.M), report


def assert_ships_the_embedding_model(install: Path, report: str) -> None:
    """#34: where torch is (the convert extra, as tests/run.sh installs it), build.py makes all-MiniLM-L6-v2 and
    the bundle ships it, so a .deb user's documents search has vectors, not BM25 alone; the frozen engine embeds
    with it and a paraphrase lands nearer than an unrelated sentence."""
    from app.docs import embed_model

    if embed_model.find() is None and embed_model.why_not_makeable():
        assert re.search(r"^ {2}ok {4}documents +no embedding model here", report, re.M), report
        return
    shipped = list((install / "_internal" / "embedding").glob("*.gguf"))
    assert [p.name for p in shipped] == [embed_model.FILE_NAME], shipped
    line = re.search(r"^ {2}ok {4}documents +(\S+): 384 dimensions, paraphrase ([\d.]+) against unrelated "
                     r"(-?[\d.]+)$", report, re.M)
    assert line and line.group(1) == embed_model.FILE_NAME, report


def assert_serves_and_chats(report: str) -> None:
    """The selftest's frozen `hearth serve` answered a streamed OpenAI-format request, then `hearth chat
    --endpoint` (the remote backend) got tokens from it, and the server stopped on Ctrl-C."""
    assert re.search(r"^ {2}ok {4}quantize +\S+ -> Q8_0, \d+ MB", report, re.M), report
    assert re.search(r"^ {2}ok {4}server +hearth serve at http://127\.0\.0\.1:\d+/v1 ready in [\d.]+ s; streamed "
                     r"chat completion: [1-9]\d* tokens", report, re.M), report
    assert re.search(r"^ {2}ok {4}remote +hearth chat --endpoint: [1-9]\d* tokens .*stopped cleanly on Ctrl-C", report,
                     re.M), report


@bundle_test
def test_unpacked_bundle_runs_the_cli_and_names_a_bad_model_in_one_sentence(unpacked, home):
    version = run_bundle(unpacked, "--version", home=home, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"hearth {__version__}", version.stderr
    bad = home / "broken.gguf"
    bad.write_bytes(b"not a model")
    proc = run_bundle(unpacked, "chat", "--model", str(bad), "--prompt", "hi", home=home, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.startswith("hearth: ") and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@bundle_test
def test_unpacked_bundle_adds_an_mcp_server_lists_its_tools_and_prints_a_calls_real_result(unpacked, home):
    """The frozen Hearth carries the MCP SDK: a user adds a stdio server, tests it, and a chat calls one of its tools
    and shows what the server answered. The server is the tests' own (tests/tools/misbehaving_server.py), run by
    this test's Python, which has the SDK's server side; the bundle is its client only."""
    from tests.helpers.paths import MISBEHAVING_MCP

    added = run_bundle(unpacked, "tools", "add", "probe", "--env", "HEARTH_PROBE=hello from the server", "--",
                       sys.executable, str(MISBEHAVING_MCP), home=home, timeout=60)
    assert added.returncode == 0, added.stdout + added.stderr
    assert added.stdout.startswith("Added MCP server 'probe'"), added.stdout
    listed = run_bundle(unpacked, "tools", "list", home=home, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"probe  stdio  {sys.executable} {MISBEHAVING_MCP}"), listed.stdout

    tested = run_bundle(unpacked, "tools", "test", "probe", home=home, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert re.match(r"MCP server 'probe' \(misbehaving\) answered in [\d.]+ s with 8 tool\(s\):", tested.stdout), \
        tested.stdout
    tools = re.findall(r"^ {2}(\w+): (.*)$", tested.stdout, re.M)
    assert ("env", "The value of an environment variable of this server's process.") in tools, tested.stdout
    assert {"crash", "long_text", "tick"} <= {name for name, _ in tools}, tested.stdout

    # Forced, with its argument fixed: the bundled 135M model cannot choose tools (docs/tools.md).
    chat = run_bundle(unpacked, "chat", "--tools", "probe", "--allow-tools", "--tool-choice", "env", "--tool-arg",
                      "env.name=HEARTH_PROBE", "--max-tool-rounds", "1", "--prompt", "What is HEARTH_PROBE set to?",
                      "--temp", "0", "--max-tokens", "60", home=home)
    assert chat.returncode == 0 and "Traceback" not in chat.stderr, chat.stdout + chat.stderr
    assert "hearth: tools from probe (8 tools); every call runs without asking" in chat.stderr, chat.stderr
    assert '[tool call] probe.env {"name": "HEARTH_PROBE"}' in chat.stdout, chat.stdout
    # The value given to the server's process with `tools add --env`, as the server itself read it.
    assert re.search(r"^\[tool result\] probe\.env \([\d.]+ s\): hello from the server$", chat.stdout, re.M), \
        chat.stdout


@bundle_test
def test_unpacked_bundle_quantizes_in_its_worker_process_and_chats_with_the_result(unpacked, home):
    """`--quantize-worker` is another hidden flag of the frozen executable; its output must load and answer."""
    model = next((unpacked.parent / "_internal" / "models").glob("*.gguf"))
    out = home / "smol-q8_0.gguf"
    proc = run_bundle(unpacked, "models", "quantize", "--type", "Q8_0", "--allow-requantize", "--out", str(out), "--json",
                      str(model),
                      home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["type"] == "Q8_0" and out.stat().st_size > model.stat().st_size
    chat = run_bundle(unpacked, "chat", "--model", str(out), "--prompt", "Say hi.", "--temp", "0", "--max-tokens",
                      "6", "--json", home=home)
    assert chat.returncode == 0, chat.stderr
    assert json.loads(chat.stdout)["completion_tokens"] > 0


def archived_packages(exe: Path) -> set[str]:
    """The top-level modules in the executable's PYZ archive: pure-Python packages live only there, never as folders
    of _internal."""
    from PyInstaller.archive.readers import CArchiveReader

    carchive = CArchiveReader(str(exe))
    pyz = carchive.open_embedded_archive(next(name for name in carchive.toc if name.endswith(".pyz")))
    return {name.split(".")[0] for name in pyz.toc}


@bundle_test
def test_bundle_is_lean(built):
    bundle = built / "Hearth"
    # PyInstaller links some libraries into _internal/ from where they lie; count each file once.
    files = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()]
    names = [str(p.relative_to(bundle)) for p in files]
    assert not [n for n in names if any(q in n for q in UNUSED_QT)], "unused Qt modules were bundled"
    top = {Path(n).parts[1] for n in names if len(Path(n).parts) > 1} | archived_packages(bundle / "Hearth")
    assert "mcp" in top and "pydantic" in top, "the MCP SDK is missing (Hearth's tools need it)"
    assert not top & set(UNUSED_PACKAGES), top & set(UNUSED_PACKAGES)
    # llama.cpp's libraries once each, not once per versioned symlink name.
    assert not [n for n in names if re.search(r"libllama\.so\.\d", n)], [n for n in names if "libllama" in n]
    assert not [n for n in names if "Qt/translations/" in n], "Qt's translations were bundled (Hearth loads none)"
    libpython = next(p for p in files if p.name.startswith("libpython3"))
    assert libpython.stat().st_size < 12e6, f"libpython is not stripped ({libpython.stat().st_size / 1e6:.0f} MB)"
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    model_mb = sum(p.stat().st_size for p in files if p.suffix == ".gguf") / 1e6
    print(f"bundle {size_mb:.0f} MB, of which the model {model_mb:.0f} MB")
    assert model_mb > 50, "the bundled model is missing"
    assert size_mb < MAX_BUNDLE_MB


# --- the Debian package ---------------------------------------------------------------------------------------

def dpkg(root: Path, home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """dpkg on a throwaway root, as any user: no maintainer script could run chrooted there anyway (and the
    package has none)."""
    command = ["dpkg", "--force-not-root", "--force-script-chrootless", f"--root={root}", "--log=/dev/null", *args]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def deb(built) -> Path:
    debs = list(built.glob(f"hearth_{__version__}_*.deb"))
    assert len(debs) == 1, list(built.iterdir())
    return debs[0]


@pytest.fixture(scope="module")
def system(deb, tmp_path_factory) -> Path:
    """A throwaway root with an empty dpkg database, a user's existing Hearth data, and the package installed."""
    if shutil.which("dpkg") is None:
        pytest.fail("dpkg is not installed")
    root = tmp_path_factory.mktemp("system")
    for folder in ("var/lib/dpkg/info", "var/lib/dpkg/updates"):
        (root / folder).mkdir(parents=True)
    (root / "var/lib/dpkg/status").touch()
    data = root / "home/user/.local/share/Hearth"
    data.mkdir(parents=True)
    (data / "chats.json").write_text('{"chats": []}')
    # Only Depends is forced: this root has no libc6 package; the machine running the test has the libraries.
    proc = dpkg(root, root / "home/user", "--force-depends", "--install", str(deb))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Setting up hearth" in proc.stdout, proc.stdout
    return root


def control_fields(deb: Path) -> dict[str, str]:
    info = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\S+): (.*)$", info, re.M)}


@bundle_test
def test_deb_says_what_it_is_and_what_it_needs(deb):
    fields = control_fields(deb)
    assert fields["Package"] == "hearth" and fields["Version"] == __version__
    assert deb.name == f"hearth_{__version__}_{fields['Architecture']}.deb"
    depends = fields["Depends"]
    # glibc and the libraries PyInstaller leaves to the system: Qt's xcb plugin, GL, Wayland, and the Vulkan loader
    # that the shipped Vulkan engine runtime opens.
    for package in ("libc6 (>= ", "libgl1", "libegl1", "libxcb-icccm4", "libxcb-keysyms1", "libwayland-client0",
                    "libvulkan1"):
        assert package in depends, depends
    assert int(fields["Installed-Size"]) > 200_000  # KiB: the bundle with its model
    # No maintainer scripts: nothing runs as root at install, and nothing at removal can touch user data.
    members = subprocess.run(f"dpkg-deb --ctrl-tarfile '{deb}' | tar -t", shell=True, capture_output=True,
                             text=True, check=True).stdout.split()
    assert sorted(m.strip("./") for m in members if m.strip("./")) == ["control", "md5sums"], members


@bundle_test
def test_deb_installs_the_bundle_under_opt_with_a_command_and_desktop_integration(deb, system):
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    paths = [line.split()[5].lstrip(".") for line in listing]
    assert all(p == "/" or p.startswith(("/opt/", "/usr/")) or p in ("/opt", "/usr") for p in paths), \
        [p for p in paths if not p.startswith(("/opt", "/usr"))]
    assert all(line.split()[1] == "root/root" for line in listing), "files must belong to root"
    link = next(line for line in listing if " ./usr/bin/hearth " in line + " ")
    assert link.startswith("l") and link.endswith("./usr/bin/hearth -> /opt/hearth/Hearth"), link
    assert os.readlink(system / "usr/bin/hearth") == "/opt/hearth/Hearth"
    assert os.access(system / "opt/hearth/Hearth", os.X_OK)
    share = system / "usr/share"
    assert (share / "applications" / f"{APP_ID}.desktop").is_file()
    assert (share / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    for size in (16, 32, 48, 64, 128, 256, 512):
        assert (share / f"icons/hicolor/{size}x{size}/apps/{APP_ID}.png").is_file(), size
    assert (share / f"icons/hicolor/scalable/apps/{APP_ID}.svg").is_file()
    assert (share / "doc/hearth/copyright").is_file()
    # dpkg checks every installed file against the package's md5sums.
    verify = dpkg(system, system / "home/user", "--verify", "hearth")
    assert verify.returncode == 0 and not verify.stdout.strip(), verify.stdout + verify.stderr


# The Desktop Entry Specification's required keys, and those a launcher needs to show and start Hearth.
DESKTOP_REQUIRED = {"Type": "Application", "Name": "Hearth"}


@bundle_test
def test_deb_desktop_entry_and_metainfo_are_valid_and_point_at_the_installed_files(system):
    desktop = system / "usr/share/applications" / f"{APP_ID}.desktop"
    if shutil.which("desktop-file-validate"):
        proc = subprocess.run(["desktop-file-validate", str(desktop)], capture_output=True, text=True)
        # Hints (a category that "can be extended") are advice; errors and warnings are defects.
        complaints = [line for line in proc.stdout.splitlines() if ": error: " in line or ": warning: " in line]
        assert proc.returncode == 0 and not complaints, proc.stdout + proc.stderr
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive in the spec
    parser.read_string(desktop.read_text(encoding="utf-8"))
    assert parser.sections() == ["Desktop Entry"], parser.sections()
    entry = parser["Desktop Entry"]
    for key, value in DESKTOP_REQUIRED.items():
        assert entry.get(key) == value, (key, entry.get(key))
    assert entry["Categories"].endswith(";") and entry["Keywords"].endswith(";")
    # One main category (the menu spec's): the entry appears once in a menu, not once per category.
    main = {"AudioVideo", "Audio", "Video", "Development", "Education", "Game", "Graphics", "Network", "Office",
            "Science", "Settings", "System", "Utility"}
    assert len(main & set(entry["Categories"].split(";"))) == 1, entry["Categories"]
    # Exec and TryExec name the command the package puts on PATH; Icon the name its icons carry.
    command = entry["Exec"].split()[0]
    assert command == entry["TryExec"] == "hearth" and (system / "usr/bin" / command).is_symlink()
    assert entry["Icon"] == APP_ID
    assert entry["StartupWMClass"] == "Hearth"

    metainfo = system / "usr/share/metainfo" / f"{APP_ID}.metainfo.xml"
    if shutil.which("appstreamcli") is None:
        pytest.skip("appstreamcli is not installed (apt-get install appstream)")
    proc = subprocess.run(["appstreamcli", "validate", "--no-net", "--explain", str(metainfo)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = metainfo.read_text(encoding="utf-8")
    assert f'<launchable type="desktop-id">{desktop.name}</launchable>' in text
    assert "<binary>hearth</binary>" in text


def keyring_service_installed() -> bool:
    return bool(shutil.which("dbus-run-session") and shutil.which("gnome-keyring-daemon"))


def keyring_session(command: list[str]) -> list[str]:
    """command under a private D-Bus session with GNOME Keyring unlocked, where both are installed (tests/run.sh
    installs them): the installed package then shows that it reaches a real Secret Service."""
    if not keyring_service_installed():
        return command
    script = ('echo -n selftest | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; '
              'sleep 0.5; exec "$@"')
    return ["dbus-run-session", "--", "sh", "-c", script, "keyring-session", *command]


@bundle_test
def test_installed_deb_passes_its_selftest_as_the_hearth_command_from_a_clean_home(system, home):
    # The package's /usr/bin/hearth points at /opt/hearth/Hearth; outside a chroot that is this root's copy.
    bin_dir = home.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "hearth").symlink_to(system / "opt/hearth/Hearth")
    env = dict(clean_env(home), PATH=f"{bin_dir}:/usr/bin:/bin")
    proc = subprocess.run(keyring_session(["hearth", "--selftest"]), capture_output=True, text=True, timeout=300,
                          env=env, cwd=home, stdin=subprocess.DEVNULL)
    report = proc.stdout
    print(report)
    assert proc.returncode == 0, report + proc.stderr[-3000:]
    assert report.rstrip().endswith("selftest passed")
    installed = str(system / "opt/hearth")
    assert "(frozen bundle, Python" in report and f"executable {installed}/Hearth" in report, report
    assert re.search(rf"^ {{2}}ok {{4}}model +.+ at {re.escape(installed)}/_internal/models$", report, re.M), report
    assert_serves_and_chats(report)
    assert_ships_the_vulkan_runtime(system / "opt/hearth", report)
    assert_ships_the_embedding_model(system / "opt/hearth", report)
    if keyring_service_installed():
        assert re.search(r"^ {2}ok {4}keyring +API keys go to keyring\.backends\.SecretService\.Keyring$", report,
                         re.M), report
    # The selftest keeps to a home of its own: nothing is left in the user's.
    assert not [p for p in home.rglob("*") if "Hearth" in p.parts], list(home.rglob("*"))


@bundle_test
def test_installed_hearth_serve_answers_the_openai_client_and_stops_on_ctrl_c(system, home):
    """The frozen server driven by the real openai package (which the bundle itself does not carry)."""
    from openai import OpenAI

    key = "deb-test-key"
    env = dict(clean_env(home), HEARTH_API_KEY=key)
    server = subprocess.Popen([str(system / "opt/hearth/Hearth"), "serve", "--port", "0", "--ctx", "512"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=home,
                              stdin=subprocess.DEVNULL)
    try:
        line = server.stdout.readline()  # the model loads before the socket opens: this line means ready
        assert " at http://127.0.0.1:" in line, line + server.stderr.read()[-3000:]
        client = OpenAI(base_url=line.split(" at ", 1)[1].split()[0], api_key=key, max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi."}],
                                                max_tokens=6, temperature=0)
        assert answer.choices[0].message.content.strip() and answer.usage.completion_tokens > 0
        streamed = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi."}],
                                                  max_tokens=6, temperature=0, stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices).strip()
        server.send_signal(signal.SIGINT)
        assert server.wait(30) in (0, 130)  # 130: a program that stopped on SIGINT
        assert "Traceback" not in server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@bundle_test
def test_installed_hearth_opens_its_window_on_an_x_server(system, home):
    """The selftest paints offscreen; this one loads Qt's xcb plugin, which needs the libraries the package
    Depends on (libxcb-icccm4, libxcb-keysyms1: the usual reason a frozen Qt app shows no window)."""
    if not (shutil.which("Xvfb") and shutil.which("xwininfo")):
        pytest.skip("Xvfb and xwininfo are not installed (tests/run.sh installs xvfb and x11-utils)")
    read, write = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1400x900x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    app = None
    try:
        with os.fdopen(read) as numbers:
            display = f":{numbers.readline().strip()}"
        app = subprocess.Popen([str(system / "opt/hearth/Hearth")], env=dict(clean_env(home), DISPLAY=display),
                               cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
        deadline, window = time.monotonic() + 60, None
        while window is None and time.monotonic() < deadline and app.poll() is None:
            tree = subprocess.run(["xwininfo", "-root", "-tree", "-display", display], capture_output=True,
                                  text=True).stdout
            # The main window: WM_CLASS ("hearth", "Hearth"), as the desktop entry's StartupWMClass says.
            window = re.search(r'"Hearth": \("hearth" "Hearth"\)\s+(\d+)x(\d+)', tree)
            window = window if window and int(window.group(1)) >= 640 else None
            time.sleep(0.5)
        assert app.poll() is None, app.stdout.read()[-3000:]
        assert window, tree
    finally:
        for proc in (app, xvfb):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@bundle_test
def test_purging_the_deb_removes_every_installed_file_and_keeps_the_users_data(system):
    """Last of the package tests (it removes what they use): `apt purge hearth` leaves ~/.local/share/Hearth."""
    proc = dpkg(system, system / "home/user", "--purge", "hearth")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    left = sorted(str(p.relative_to(system)) for p in system.rglob("*")
                  if not p.is_dir() and not str(p.relative_to(system)).startswith(("var/lib/dpkg", "home/")))
    assert left == [], left
    assert not (system / "opt").exists() and not (system / "usr").exists()
    assert (system / "home/user/.local/share/Hearth/chats.json").read_text() == '{"chats": []}'


def test_deb_only_without_a_bundle_says_so_in_one_sentence(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--deb-only", "--dist",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"build.py: {tmp_path / 'Hearth'} holds no Hearth bundle; build it first " \
                                  "(without --deb-only).", proc.stderr


def test_selftest_names_the_failing_check_and_exits_non_zero(tmp_path):
    """From source: a missing model fails the model and engine checks with a sentence, and the GUI still passes."""
    env = dict(os.environ, HEARTH_BUNDLED_MODEL=str(tmp_path / "missing.gguf"))
    proc = subprocess.run([sys.executable, "-m", "app", "--selftest"], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^ {2}FAIL {2}model +.*missing\.gguf", proc.stdout, re.M), proc.stdout
    assert re.search(r"^ {2}FAIL {2}engine ", proc.stdout, re.M), proc.stdout
    assert re.search(r"^ {2}ok {4}gui ", proc.stdout, re.M), proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("selftest failed: model: ")
    assert "Traceback" not in proc.stdout + proc.stderr
