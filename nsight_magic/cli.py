"""Command line: `nsight-magic profile script.py [args]`, `nsight-magic view REPORT -o view.html`,
`nsight-magic diff A B [-o page.html] [--fail-above PCT]`, `nsight-magic baseline NAME PROFILE`,
`nsight-magic export REPORT --perfetto out.json[.gz]`, `nsight-magic doctor`,
`nsight-magic kernel install|list|remove` (the in-place kernel)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

from .errors import NsightMagicError, OptionError, ReportWarning
from .options import COMMON_ARGS, NSYS_ARGS, join_passthrough, nsys_options_from_args
from .store import write_page


def _add(parser: argparse.ArgumentParser, *specs) -> None:
    for group in specs:
        for flags, kwargs in group:
            if flags[0] in ("--vars", "--no-vars", "--return", "--wait"):  # notebook matters: not for a script
                continue
            parser.add_argument(*flags, **kwargs)


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser and its `profile` subcommand's."""
    p = argparse.ArgumentParser(prog="nsight-magic", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    prof = sub.add_parser("profile", help="profile a Python script under Nsight Systems (same runner as %%nsys)")
    _add(prof, NSYS_ARGS, COMMON_ARGS)
    prof.add_argument("script", help="the Python script to run")
    prof.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    view = sub.add_parser("view", help="write a standalone HTML view of a report or profile folder")
    view.add_argument("report", help=".nsys-rep, .sqlite, .ncu-rep, .csv or a profile folder")
    view.add_argument("-o", "--output", default=None, help="HTML file to write (default: view.html beside it)")
    dif = sub.add_parser("diff", help="compare two profiles: what got faster, what got slower")
    dif.add_argument("before", help="profile folder, report file, or a profile's name in --dir")
    dif.add_argument("after", help="the same for the second profile")
    dif.add_argument("-o", "--output", default=None, help="also write the comparison as an HTML page here")
    dif.add_argument("--dir", default=None, help="where profiles named by name are (default: ./nsight-profiles)")
    dif.add_argument("--match", choices=("name", "order"), default="name",
                     help="order: number kernels repeated within a step (gemm #0, gemm #1, ...)")
    dif.add_argument("--fail-above", type=float, default=None, metavar="PCT",
                     help="exit with status 1 when the cell, a --range or a top kernel got slower by more than PCT "
                          "percent beyond the run-to-run noise the profiles show (a CI gate)")
    dif.add_argument("--range", action="append", default=[], metavar="NAME",
                     help="an NVTX range the gate checks (repeatable; digits count as one name: 'step 3' is 'step "
                          "#'); default: the loop's step range when both profiles have one")
    dif.add_argument("--top-kernels", type=int, default=5, metavar="N",
                     help="how many of the kernels that took most GPU time before the gate checks (default 5)")
    dif.add_argument("--json", default=None, metavar="FILE", help="also write the comparison (and the gate) as JSON")
    base = sub.add_parser("baseline", help="keep a profile as a named baseline in the profiles folder, to compare "
                                           "with later: nsight-magic diff baseline:NAME PROFILE")
    base.add_argument("name", nargs="?", help="the baseline's name (none: list the baselines)")
    base.add_argument("profile", nargs="?", help="profile folder, or a profile's name or index in --dir "
                                                 "(default: the newest)")
    base.add_argument("--dir", default=None, help="the profiles folder (default: ./nsight-profiles)")
    exp = sub.add_parser("export", help="write a profile as a Chrome / Perfetto trace (ui.perfetto.dev, Chrome "
                                        "DevTools) for people without Nsight")
    exp.add_argument("report", help=".nsys-rep, .sqlite or a profile folder")
    exp.add_argument("--perfetto", required=True, metavar="OUT.json[.gz]",
                     help="the trace file to write (Trace Event JSON; .gz compresses)")
    sub.add_parser("doctor", help="check nsys, ncu, GPU, NVTX and the profile folder")
    ker = sub.add_parser("kernel", help="the in-place kernel: a Jupyter kernel under nsys launch, whose %%nsys "
                                        "records a cell in the kernel itself (nothing re-run, models held once)")
    ksub = ker.add_subparsers(dest="kernel_command", required=True)
    ins = ksub.add_parser("install", help="write the kernelspec for this Python environment")
    where = ins.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user (~/.local/share/jupyter)")
    where.add_argument("--sys-prefix", action="store_true", help=f"in this environment ({sys.prefix}; the default "
                                                                 "inside a virtual environment)")
    where.add_argument("--prefix", default=None, metavar="DIR", help="under DIR/share/jupyter/kernels")
    ins.add_argument("--name", default=None, help="the kernelspec's name (default nsight-magic, with --ncu "
                                                  "nsight-magic-ncu)")
    ins.add_argument("--trace", default="cuda,nvtx",
                     help="what nsys traces, fixed for the kernel's life (default cuda,nvtx; with osrt `nsys stop` "
                          "takes about three times as long)")
    ins.add_argument("--env", default="", metavar="NAME,NAME",
                     help="environment variables the kernel gets beyond the allow-list (each is recorded in the "
                          "reports)")
    ins.add_argument("--memory", action="store_true",
                     help="nsys records every device allocation too (--cuda-memory-usage; about a third slower "
                          "GPU work while recording); torch's allocator history is recorded either way")
    ins.add_argument("--ncu", action="store_true",
                     help="a kernel under Nsight Compute instead: its %%%%ncu measures a cell's kernels in place")
    ins.add_argument("--set", dest="ncu_set", default=None, metavar="SET",
                     help="with --ncu: the section set every kernel is measured with (default basic)")
    ins.add_argument("--section", dest="sections", action="append", default=None, metavar="NAME",
                     help="with --ncu: the sections beside the set (repeatable; default MemoryWorkloadAnalysis)")
    ksub.add_parser("list", help="the in-place kernels Jupyter finds")
    rem = ksub.add_parser("remove", help="remove an in-place kernelspec")
    rem.add_argument("name")
    return p, prof


def _say_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning):
    """A ReportWarning (a damaged optional file left out, rows of a report left out) as one line of ours."""
    if issubclass(category, ReportWarning):
        print(f"nsight-magic: {message}", file=sys.stderr)
    else:
        _default(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _say_warning
    parser, profile = _parsers()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:  # `--nsys-args --sample=cpu` as the magic takes it
        argv[1:] = join_passthrough(argv[1:], profile)
    args = parser.parse_args(argv)
    try:
        return {"profile": _profile, "view": _view, "diff": _diff, "doctor": _doctor,
                "kernel": _kernel, "baseline": _baseline, "export": _export}[args.command](args)
    except NsightMagicError as e:
        print(f"nsight-magic: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing a page: a full disk, a folder made read-only meanwhile (pages are written whole)
        print(f"nsight-magic: could not write {e.filename or 'the output'} ({e.strerror or e}); nothing was left "
              "half-written: free space or choose another -o", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nsight-magic: stopped (Ctrl-C); files already written are kept", file=sys.stderr)
        return 130


def _kernel(args) -> int:
    from . import inplace_kernel as k

    if args.kernel_command == "install":
        in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
        user = args.user or not (args.sys_prefix or args.prefix or in_venv)
        prefix = args.prefix or (sys.prefix if (args.sys_prefix or (in_venv and not args.user)) else None)
        if not args.ncu and (args.ncu_set or args.sections):
            raise OptionError("--set and --section choose what an Nsight Compute kernel measures: add --ncu")
        if args.ncu and (args.memory or args.trace != k.DEFAULT_TRACE):
            raise OptionError("--trace and --memory are nsys's: an Nsight Compute kernel (--ncu) measures kernels")
        try:
            where = k.install(args.name, trace=args.trace, env_names=[n for n in args.env.split(",") if n],
                              user=user, prefix=prefix, memory=args.memory, ncu=args.ncu, ncu_set=args.ncu_set,
                              sections=args.sections)
        except OSError as e:  # a --prefix that is a file, a folder that cannot be written, a full disk
            place = f"--prefix {prefix}" if args.prefix else ("--user" if user else f"this environment ({sys.prefix})")
            raise NsightMagicError(f"could not write the kernelspec under {place} ({e.strerror or e}"
                                   f"{': ' + str(e.filename) if e.filename else ''}); choose a folder you can "
                                   "write (--prefix DIR, --user)") from None
        what = "measuring kernels with Nsight Compute" if args.ncu else f"tracing {args.trace}"
        print(f"nsight-magic: installed the in-place kernel {where.name!r} in {where} ({what}); choose it in "
              "JupyterLab's launcher or kernel picker")
    elif args.kernel_command == "list":
        found = k.installed()
        for name, info in found.items():
            what = f"ncu --set {info['set']}" if info["tool"] == "ncu" else f"nsys {info['trace']}"
            print(f"{name}\t{what}\t{info['dir']}")
        if not found:
            print("nsight-magic: no in-place kernel installed (nsight-magic kernel install)", file=sys.stderr)
    else:
        print(f"nsight-magic: removed {k.remove(args.name)}")
    return 0


def check_output_file(path: Path) -> None:
    """An HTML file we are asked to write: its folder must exist and be writable, and it must not be a folder."""
    from .errors import OptionError

    if path.is_dir():
        raise OptionError(f"-o {path}: is a folder; give a file name such as {path / 'diff.html'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OptionError(f"-o {path}: the folder {parent} does not exist; create it or choose another file")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OptionError(f"-o {path}: not writable; choose another file")


def _diff(args) -> int:
    from .analysis.gate import check_args, gate
    from .frontend import diff_profiles
    from .views.diff import diff_json, diff_page, diff_text

    root = Path(args.dir) if args.dir else Path.cwd() / "nsight-profiles"
    for out in (args.output, args.json):
        if out:
            check_output_file(Path(out))  # before the comparison: a bad path must not cost its time
    if args.fail_above is None and (args.range or args.top_kernels != 5):
        raise OptionError("--range and --top-kernels choose what --fail-above checks: add --fail-above PCT")
    if args.fail_above is not None:
        check_args(args.fail_above, args.top_kernels)
    d = diff_profiles(args.before, args.after, root, match=args.match)
    result = None
    if args.fail_above is not None:
        result = gate(d, args.fail_above, ranges=args.range, top_kernels=args.top_kernels)
    print(diff_text(d))
    if result is not None:
        print("\n" + "\n".join(result.lines()))
    if args.output:
        write_page(Path(args.output), diff_page(d))
        print(f"nsight-magic: wrote {args.output}", file=sys.stderr)
    if args.json:
        import json

        write_page(Path(args.json), json.dumps(diff_json(d, result), indent=1))
        print(f"nsight-magic: wrote {args.json}", file=sys.stderr)
    return 1 if result is not None and result.failed else 0


def _baseline(args) -> int:
    from .baselines import baselines, source_of
    from .store import save_baseline

    root = Path(args.dir).resolve() if args.dir else Path.cwd() / "nsight-profiles"
    if args.name is None:
        found = baselines(root)
        for name, folder in found.items():
            print(f"{name}\t{folder}\t{source_of(folder) or '?'}")
        if not found:
            print(f"nsight-magic: no baselines in {root} (nsight-magic baseline NAME PROFILE)", file=sys.stderr)
        return 0
    dst = save_baseline(args.name, args.profile, root)
    print(f"nsight-magic: kept {Path(source_of(dst)).name} as baseline {args.name!r} ({dst}); compare with: "
          f"nsight-magic diff baseline:{args.name} PROFILE --fail-above PCT")
    return 0


def _profile(args) -> int:
    from .run import run_nsys

    args.vars, args.no_vars, args.returns = None, True, None
    script = Path(args.script).resolve()
    if not script.is_file():
        why = ("is a folder; give the Python script to run in it" if script.is_dir() else
               "is not a regular file (a pipe or a device); give a Python script" if script.exists() else
               "no such script")
        print(f"nsight-magic: {args.script}: {why}", file=sys.stderr)
        return 2
    opts = nsys_options_from_args(args, default_name=script.stem)
    out = lambda stream, text: (sys.stdout if stream == "stdout" else sys.stderr).write(text)  # noqa: E731
    status = (lambda phase, t: None) if opts.quiet else (
        lambda phase, t: print(f"[nsight-magic] {phase} ({t:.1f} s)", file=sys.stderr))
    result = run_nsys(script.read_text(), opts, script=str(script), script_args=args.script_args,
                      on_output=None if opts.quiet else out, on_status=status)
    for m in result.notes + result.messages:
        print(f"nsight-magic: {m}", file=sys.stderr)
    if result.sqlite:
        report = result.open()
        if opts.render:
            from .views import write_view_html

            path = write_view_html(report, result.folder.view_html, folder=result.folder.path,
                                   thresholds=opts.thresholds)
            print(f"nsight-magic: view written to {path}")
        from .views import nsys_text

        print(nsys_text(report))
    print(f"nsight-magic: profile saved in {result.folder.path}")
    return 0 if result.ok else 1


def _view(args) -> int:
    from .report import open_report

    src = Path(args.report)
    out = Path(args.output) if args.output else (src if src.is_dir() else src.parent) / "view.html"
    check_output_file(out)
    report = open_report(src)
    folder = src if src.is_dir() else None
    if report.tool == "ncu":
        from .views.ncu import ncu_html

        write_page(out, ncu_html(report, folder=folder))
    else:
        from .views import write_view_html

        write_view_html(report, out, folder=folder)
    print(f"nsight-magic: view written to {out}")
    return 0


def _export(args) -> int:
    from . import export_trace

    out = Path(args.perfetto)
    check_output_file(out)
    counts = export_trace(args.report, out)
    said = ", ".join(f"{v:,} {k}" for k, v in counts.items() if v)
    print(f"nsight-magic: trace written to {out} ({said}); open it in https://ui.perfetto.dev")
    return 0


def _doctor(args) -> int:
    """Each check prints one line: ok / warn / FAIL, and what to do."""
    from . import tools
    from .store import profiles_root

    failed = False

    def say(level: str, text: str) -> None:
        nonlocal failed
        failed |= level == "FAIL"
        print(f"{level:<4}  {text}")

    nsys_version = None
    try:
        nsys = tools.find_nsys()
        nsys_version = tools.nsys_version(nsys)
        say("ok", f"nsys {nsys_version} at {nsys}")
        importer = tools.find_qdstrm_importer(nsys)
        if importer:
            say("ok", f"QdstrmImporter at {importer}")
        else:
            say("FAIL", f"no QdstrmImporter beside {nsys}: nsys can record but not make reports; reinstall nsys")
    except NsightMagicError as e:
        say("FAIL", str(e))
    from .tools import ncu as ncu_tool

    try:
        ncu = ncu_tool.find_ncu()
        say("ok", f"ncu {ncu_tool.ncu_version(ncu)} at {ncu}")
    except NsightMagicError as e:
        say("warn", f"{e} (only %%ncu needs it)")
    try:
        from .readers.ncu_module import load_ncu_report_module

        module, version = load_ncu_report_module()
        say("ok", f"ncu_report {version} from {Path(module.__file__).parent} reads .ncu-rep files")
    except NsightMagicError as e:
        say("warn", f"{e} (only .ncu-rep files need it)")
    if tools.gpu_visible():
        names = tools.gpu_names()
        say("ok", f"GPU visible: {', '.join(names) or 'yes'}")
    else:
        say("warn", "no GPU visible: %%nsys will trace CPU activity and NVTX only; %%ncu cannot run")
    root = profiles_root(None)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root):
            pass
        say("ok", f"profile folder {root} is writable")
    except OSError as e:
        say("FAIL", f"profile folder {root} is not writable ({e.strerror}); use --dir")
    nvtx_version = _dist("nvtx")
    if nvtx_version is None:
        say("warn", "Python package nvtx not installed: pip install nvtx (needed for --capture cell)")
    else:
        pitfall = tools.nvtx_pitfall(nsys_version)
        if pitfall:
            say("warn", pitfall)
        else:
            say("ok", f"nvtx {nvtx_version} ranges are recorded by this nsys")
    from .tools.environment import profiled_environment

    _, hidden = profiled_environment()
    if hidden:
        say("ok", f"not passed to profiled processes (outside the allow-list, or secret-looking): {', '.join(hidden)}"
                  " (pass one with --env NAME)")
    return 1 if failed else 0


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
