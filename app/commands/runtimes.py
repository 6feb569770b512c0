"""`hearth runtimes list|build|rm`: the native llama.cpp libraries an engine can run on (cpu, vulkan, cuda)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from app.core.units import human_size

# Measured: Vulkan here (2 shared cores); CUDA on the 16-core GPU machine (DESIGN.md, "Known facts").
BUILD_TIME = {"vulkan": "about 25 minutes on 2 cores", "cuda": "about 5 minutes on 16 cores for one architecture, "
              "more for each one added"}


def register(sub) -> None:
    p = sub.add_parser("runtimes", help="list, build and remove engine runtimes (CPU, Vulkan, CUDA)",
                       description="An engine runtime is a build of llama.cpp's libraries that Hearth's engine "
                                   "loads: cpu is llama-cpp-python's own; vulkan and cuda are built from the "
                                   "same llama.cpp sources, or shipped with the installation.")
    runtimes_sub = p.add_subparsers(dest="runtimes_command", metavar="ACTION", required=True)

    s = runtimes_sub.add_parser("list", help="each runtime with its backend, version, folder, size and devices")
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-probe", action="store_true", help="do not load the runtimes to list their devices")
    s.add_argument("--devices", metavar="LIST",
                   help="device indices to probe with (GGML_VK_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES), "
                        "e.g. 0 to include a software Vulkan device")
    s.set_defaults(func=_list)

    from app.core.making.runtime_build import BUILDABLE, add_build_arguments

    s = runtimes_sub.add_parser("build", help="build the vulkan or cuda runtime (cached: a second build is instant)",
                                description="Builds llama.cpp's libraries with the Vulkan or CUDA backend from "
                                            "the sources of the installed llama-cpp-python. Vulkan needs cmake, a "
                                            "C++ compiler, glslc, spirv-headers and libvulkan-dev (Debian "
                                            "packages); CUDA needs the CUDA toolkit (nvcc).")
    s.add_argument("name", choices=BUILDABLE)
    add_build_arguments(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_build)

    s = runtimes_sub.add_parser("rm", help="remove a runtime built here (by name, or by its folder's name)")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_rm)


# --- shown here and in `hearth doctor` --------------------------------------------------------------------------

def collect(probe: bool = True, visible_devices: str | None = None) -> list[dict]:
    """Every runtime as JSON, with its probe's answer (devices, offload) unless probe is False."""
    from app.core.making.runtimes import list_runtimes, probe_runtime

    entries = []
    for runtime in list_runtimes():
        entry = runtime.to_json()
        if probe:
            if runtime.compatible:
                entry["probe"] = probe_runtime(runtime, visible_devices=visible_devices).to_json()
            else:
                entry["probe"] = {"ok": False, "error": f"not probed: {runtime.incompatible_reason()}.",
                                  "devices": [], "vulkan_devices": [], "gpu_offload": False}
        entries.append(entry)
    return entries


def _mb(value: int | None) -> str:
    return human_size((value or 0) * 2**20) if value is not None else "?"


def describe(entry: dict) -> list[str]:
    """Lines for one runtime (of collect()): a header, then its devices."""
    target = f" ({entry['cpu_target']} CPU code)" if entry.get("cpu_target") else ""
    origin = {"wheel": "llama-cpp-python's own", "built": f"built here{target}",
              "shipped": f"shipped with Hearth{target}"}.get(entry["origin"], entry["origin"])
    lines = [f"{entry['name']:7} {entry['backend']:7} llama-cpp-python {entry['version']}, {origin}, "
             f"{human_size(entry['size_bytes'])}",
             f"        folder: {entry['folder']}"]
    if entry.get("incompatible"):
        lines.append(f"        unusable: {entry['incompatible']}")
    probe = entry.get("probe")
    if probe is None:
        return lines
    if not probe.get("ok"):
        lines.append(f"        error: {probe.get('error')}")
        return lines
    lines.append(f"        GPU offload: {'yes' if probe.get('gpu_offload') else 'no'}"
                 f"{', ggml ' + probe['ggml_version'] if probe.get('ggml_version') else ''}")
    for device in probe.get("devices") or ():
        kind = "software GPU (not chosen by default)" if device.get("software") else device.get("type")
        lines.append(f"        {device['name']}: {device['description']} [{kind}], "
                     f"{_mb(device.get('memory_free_mb'))} free of {_mb(device.get('memory_total_mb'))}")
    shown = {d.get("description") for d in probe.get("devices") or ()}
    for device in probe.get("vulkan_devices") or ():
        if device.get("software") and device.get("name") not in shown:
            lines.append(f"        Vulkan device {device['index']}: {device['name']} [software, hidden; "
                         f"GGML_VK_VISIBLE_DEVICES={device['index']} shows it]")
    if entry["backend"] != "CPU" and not any(d.get("gpu") or d.get("software") for d in probe.get("devices") or ()):
        lines.append("        no GPU visible to this runtime")
    return lines


# --- the actions ---------------------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    entries = collect(probe=not args.no_probe, visible_devices=args.devices)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    for entry in entries:
        print("\n".join(describe(entry)))
    return 0


class _Progress:
    """Build progress on stderr at most every few seconds (the build prints thousands of lines)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.last = 0.0

    def __call__(self, fraction: float | None, line: str) -> None:
        now = time.monotonic()
        if self.quiet or fraction is None or now - self.last < 5:
            return
        self.last = now
        print(f"  {fraction * 100:3.0f}%  {line[:100]}", file=sys.stderr, flush=True)


def _build(args: argparse.Namespace) -> int:
    from app.core.making.runtime_build import build_runtime, cached, check_toolchain, log_path_for, spec_from_args
    from app.core.making.runtimes import probe_runtime, runtimes_dir

    spec = spec_from_args(args.name, args.arch, args.portable, args.tools)
    found = None if args.rebuild else cached(spec)
    started = time.monotonic()
    built = found is None
    if built:
        # Say what is missing before announcing a build of many minutes.
        check_toolchain(spec, runtimes_dir(), args.vulkan_include, not args.no_fetch_headers)
        print(f"building the {spec.name} runtime {spec.key} with {args.jobs or 'all the'} jobs: "
              f"{BUILD_TIME[spec.name]}. Log: {log_path_for(spec)}", file=sys.stderr, flush=True)
        found = build_runtime(spec, sdist=args.sdist, jobs=args.jobs, vulkan_include=args.vulkan_include,
                              fetch_headers=not args.no_fetch_headers, rebuild=args.rebuild,
                              keep_build=args.keep_build, on_progress=_Progress(args.json))
    probe = probe_runtime(found)
    entry = {**found.to_json(), "built_now": built, "elapsed_s": round(time.monotonic() - started, 1),
             "probe": probe.to_json()}
    if args.json:
        print(json.dumps(entry, indent=2))
        return 0 if probe.ok else 1
    took = f" in {entry['elapsed_s']:.0f} s" if built else ""
    print(f"{'built' if built else 'already built'}: {found.folder}{took}")
    print("\n".join(describe(entry)))
    return 0 if probe.ok else 1


def _rm(args: argparse.Namespace) -> int:
    from app.core.making.runtimes import remove_runtime

    removed = remove_runtime(args.name)
    if args.json:
        print(json.dumps([r.to_json() | {"removed": True} for r in removed], indent=2))
        return 0
    for runtime in removed:
        print(f"removed {runtime.key} ({runtime.folder})")
    return 0
