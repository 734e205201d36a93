"""The book's own Sphinx extension (loaded from _config.yml, sphinx: local_extensions).

What the published site needs that no chapter notebook should have to carry:

* **Each dataset once.** When the build finishes, every dataset in ``data/runs`` becomes one
  archive, ``datasets/runs/<host>/<chapter>/<run>.zip``, and each chapter's reference figures
  (``data/reference/<chapter>*.csv``) one more, ``datasets/reference/<chapter>.zip``. No file is
  in two archives and no raw copy sits beside them. The archives are deterministic (sorted
  members, fixed timestamps) and their paths start with ``data/``, so that unzipping one at the
  top of a clone puts it where the notebooks read it.
* **Each chapter's part of the appendix.** The appendix, "How this was measured"
  (``appendix.md``), gets one part per chapter registered in perfbook.chapters (CHAPTERS): each
  run's machine, profile, time taken against the chapter's plan, rounds, stop rules and
  disturbance mark, then a "Datasets" section that links its datasets' archives, host by host,
  and its reference archive. Each chapter page ends with a link to its part; the hosts page
  (tools/perfbook/book/hostspage.py) links every host's archives through the same names
  (``dataset_url``). The plumbing is generated here, from data/, so no chapter carries it.
* **The repository behind the launch buttons.** ``_config.yml`` asks for Binder buttons, and
  the repository they open is read from ``PERFBOOK_REPOSITORY_URL`` (e.g.
  ``https://github.com/OWNER/REPO``; the Pages workflow sets it) and
  ``PERFBOOK_REPOSITORY_BRANCH`` (default ``main``). Without a URL there is no launch button,
  rather than one that opens Jupyter Book's default repository.

It also keeps the browser console clean (tests/test_site_browser.py fails on errors there): a
default colour mode for the theme, and no inline script twice on a page.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from sphinx.errors import ConfigError
from sphinx.util.display import status_iterator
from sphinx.util.osutil import relative_uri

from perfbook.analysis.findings import machine
from perfbook.analysis.repetition import STOP_TEXT, repetition_overview
from perfbook.book.compare import page_html
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import DatasetError
from perfbook.core.paths import reference_dir, runs_dir
from perfbook.data.dataset import (
    data_depth,
    is_regular,
    list_runs,
    load_manifest,
    read_data,
    subdirs,
    visible_files,
)
from perfbook.data.machine import labels, name_ids
from perfbook.hoststate.monitor import verdict_text

SITE_DIR = "datasets"
ENV_URL = "PERFBOOK_REPOSITORY_URL"
ENV_BRANCH = "PERFBOOK_REPOSITORY_BRANCH"
SECTION_ID = "datasets"
HOSTS_DOC = "hosts"
APPENDIX_DOC = "appendix"  # "How this was measured": each chapter's runs and datasets
APPENDIX_ANCHOR = "measured-chapters"  # the appendix's section that gets one part per chapter
COMPARE_DOC = "compare"  # "Your run against ours": the building machine beside the book's
COMPARE_ANCHOR = "compare-findings"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_URL_RE = re.compile(r"https://(?P<host>[A-Za-z0-9.-]+)/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_BRANCH_RE = re.compile(r"[A-Za-z0-9._/-]+")


# ---- repository / launch buttons ---------------------------------------------------------


def repository_options(environ=os.environ) -> dict:
    """Theme options for the launch buttons from the environment ({} when no URL is set).

    Raises ValueError (one line) for a value the theme could not turn into a Binder link.
    """
    url = environ.get(ENV_URL, "").strip()
    if not url:
        return {}
    url = url.rstrip("/").removesuffix(".git")
    m = _URL_RE.fullmatch(url)
    if not m or not any(p in m["host"].lower() for p in ("github", "gitlab", "bitbucket")):
        raise ValueError(f"{ENV_URL} must look like https://github.com/OWNER/REPO, got {url!r}")
    branch = environ.get(ENV_BRANCH, "").strip() or "main"
    if not _BRANCH_RE.fullmatch(branch):
        raise ValueError(f"{ENV_BRANCH} must be a branch name, got {branch!r}")
    return {"repository_url": url, "repository_branch": branch}


def _on_config_inited(app, config) -> None:
    try:
        repo = repository_options()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    opts = dict(config.html_theme_options or {})
    if repo:
        opts.update(repo)
    else:
        # Jupyter Book's default repository url is its own; a button must not open that.
        opts["launch_buttons"] = {**(opts.get("launch_buttons") or {}), "binderhub_url": ""}
        opts["repository_url"] = ""
    config.html_theme_options = opts
    # pydata-sphinx-theme reads the colour mode from html_context; without it every page logs
    # "Got invalid theme mode" in the browser console and falls back to "auto" anyway.
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def _on_html_page_context(app, pagename, templatename, context, doctree) -> None:
    """Drop inline scripts that are on the page twice.

    With Sphinx 7.4 and Jupyter Book 1.0.4, sphinx-thebe's and sphinx-togglebutton's inline
    configuration scripts end up in every page twice, and the second ``const THEBE_JS_URL`` is a
    SyntaxError in the browser. Keeping the first copy of each is what the page meant.
    """
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        attrs = getattr(js, "attributes", None) or {}
        key = (os.fspath(getattr(js, "filename", None) or ""), tuple(sorted(attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


# ---- datasets ------------------------------------------------------------------------------


def run_archive(host: str, chapter: str, run_id: str) -> str:
    """Where one dataset's archive is, under datasets/ (the hosts page links the same path)."""
    return f"runs/{host}/{chapter}/{run_id}.zip"


def dataset_url(host: str, chapter: str, run_id: str) -> str:
    """The archive of one dataset, relative to the site's top (where the hosts page is)."""
    return f"{SITE_DIR}/{run_archive(host, chapter, run_id)}"


def reference_archive(chapter: str) -> str:
    return f"reference/{chapter}.zip"


@dataclass
class Run:
    host: str
    run_id: str
    path: Path  # data/runs/<host>/<chapter>/<run>
    chapter: str = ""
    description: str = ""
    profile: str = ""
    files: list[str] = field(default_factory=list)  # relative to path, sorted
    manifest: dict = field(default_factory=dict)  # its manifest (perfbook.data.manifest.Manifest)

    @property
    def archive(self) -> str:
        return run_archive(self.host, self.chapter, self.run_id)

    def members(self) -> list[tuple[Path, str]]:
        """(source file, path inside the archive below data/), sorted by the latter."""
        return sorted(
            (
                (self.path / f, f"runs/{self.host}/{self.chapter}/{self.run_id}/{f}")
                for f in self.files
            ),
            key=lambda m: m[1],
        )

    def size(self) -> int:
        return sum(os.lstat(src).st_size for src, _ in self.members())


@dataclass
class Archive:
    name: str  # its path under datasets/
    members: list[tuple[Path, str]]


@dataclass
class ChapterData:
    chapter: str
    runs: list[Run]
    references: list[Path]  # data/reference/<chapter>*.csv (the seed's, published ones)

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.runs})

    def labels(self) -> dict[str, str]:
        """host -> its machine's label (perfbook.data.machine.labels), as the chapter names it."""
        return labels({r.host: r.manifest.get("host") or {} for r in self.runs})

    def archives(self) -> list[Archive]:
        """One archive per dataset, and one of the chapter's reference figures: no file is in
        two of them."""
        out = [Archive(r.archive, r.members()) for r in self.runs]
        if self.references:
            out.append(
                Archive(
                    reference_archive(self.chapter),
                    [(ref, f"reference/{ref.name}") for ref in self.references],
                )
            )
        return out

    def members(self) -> list[tuple[Path, str]]:
        """Every file the chapter reads: (source, path below data/), sorted by the latter."""
        return sorted((m for a in self.archives() for m in a.members), key=lambda m: m[1])

    def signature(self) -> str:
        """Changes when any file is added, removed or rewritten (for incremental builds)."""
        h = hashlib.sha256()
        for src, rel in self.members():
            st = os.lstat(src)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()


def chapter_docnames() -> dict[str, str]:
    """Sphinx docname -> chapter name, for every registered chapter."""
    return {c.notebook.removesuffix(".ipynb"): c.name for c in CHAPTERS}


def _visible_files(run: Path) -> list[str]:
    """A run's files, relative to it, the manifest first; hidden files are left out, and a link
    is refused (perfbook.data.dataset.visible_files): the site publishes regular files only."""
    rel = [p.relative_to(run).as_posix() for p in visible_files(run)]
    return sorted(rel, key=lambda f: (f != "manifest.json", f))


def reference_files(chapter: str, data_dir: Path | None = None, chapters=()) -> list[Path]:
    """data/reference/<chapter>*.csv, less the files a longer chapter name among `chapters`
    claims (so that each reference file belongs to exactly one chapter)."""
    longer = [c for c in chapters if c != chapter and c.startswith(chapter)]
    return sorted(
        p
        for p in reference_dir(data_dir).glob(f"{chapter}*.csv")
        if not any(p.name.startswith(c) for c in longer) and is_regular(p)
    )


def chapter_data(chapter: str, data_dir: Path | None = None) -> ChapterData:
    runs = []
    for path in list_runs(chapter, data_dir):
        try:
            man = load_manifest(path)
        except (OSError, ValueError) as e:
            raise DatasetError(f"unreadable manifest in {path}: {e}") from None
        runs.append(
            Run(
                host=path.parent.parent.name,
                run_id=path.name,
                path=path,
                chapter=chapter,
                description=str((man.get("host") or {}).get("description") or ""),
                profile=str(man.get("profile") or ""),
                files=_visible_files(path),
                manifest=man,
            )
        )
    known = set(chapter_docnames().values()) | set(run_chapters(data_dir))
    return ChapterData(chapter, runs, reference_files(chapter, data_dir, known))


def run_chapters(data_dir: Path | None = None) -> list[str]:
    """Every chapter name with a directory under data/runs/<host>/ (registered or not)."""
    base = runs_dir(data_dir)
    return sorted({c for h in subdirs(base) for c in subdirs(base / h)})


def site_archives(data_dir: Path | None = None) -> list[Archive]:
    """Every archive the site carries: one per dataset of any chapter in data/runs (so the
    hosts page can link each one), and the reference figures of each registered chapter."""
    chapters = sorted(set(chapter_docnames().values()) | set(run_chapters(data_dir)))
    return sorted(
        (a for c in chapters for a in chapter_data(c, data_dir).archives()), key=lambda a: a.name
    )


# members compressed already (a dataset's tables): stored as they are, since deflating them
# again spent most of a fleet's book build and saved nothing
_PACKED = (".xz", ".gz", ".zst", ".bz2", ".parquet", ".png", ".zip")


def write_archive(dest: Path, members: list[tuple[Path, str]], prefix: str = "data/") -> Path:
    """A zip whose bytes depend only on the members' names and contents. A member's `rel` is
    its path below the data directory (runs/<host>/... or reference/...), and `src` ends with
    it: each is read as a regular file, none of its directories below runs/ or reference/
    followed through a link (perfbook.data.dataset.read_data)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w") as z:
            for src, rel in sorted(members, key=lambda m: m[1]):
                info = zipfile.ZipInfo(prefix + rel, date_time=_ZIP_TIME)
                info.compress_type = (
                    zipfile.ZIP_STORED if rel.endswith(_PACKED) else zipfile.ZIP_DEFLATED
                )
                info.external_attr = 0o644 << 16
                info.create_system = 3
                z.writestr(info, read_data(src, data_depth(rel))[1])
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def publish(outdir: Path, archives: list[Archive], progress=None) -> list[Path]:
    """Write each archive under outdir/datasets/ (only these: a stale one is removed)."""
    site = Path(outdir) / SITE_DIR
    if site.exists():
        shutil.rmtree(site)
    names = [a.name for a in archives]
    if len(set(names)) != len(names):
        raise ValueError(f"two archives share a name under {SITE_DIR}/")
    return [write_archive(site / a.name, a.members) for a in (progress or iter)(archives)]


def _human(nbytes: int) -> str:
    return f"{nbytes / 1024:.0f} kB" if nbytes < 1024 * 1024 else f"{nbytes / 1024 / 1024:.1f} MB"


def _link(
    text: str, target: str, cls: str = "perfbook-dataset-archive", code: bool = True
) -> nodes.reference:
    """A link to `target` (a path from the site's top, e.g. datasets/<archive>); its URI is
    made relative for each builder later."""
    ref = nodes.reference(
        "",
        "",
        nodes.literal(text, text) if code else nodes.Text(text),
        internal=False,
        refuri=target,
    )
    ref["perfbook_target"] = target
    ref["classes"].append(cls)
    return ref


def _run_facts(r: Run) -> str:
    said = [f"profile {r.profile}"] if r.profile else []
    return ", ".join(said + [f"{len(r.files)} file{'s' * (len(r.files) != 1)}", _human(r.size())])


def datasets_section(data: ChapterData, document, hosts_page: bool = True) -> nodes.section:
    """A chapter's Datasets section, in its part of the appendix: a link to each of its
    datasets' archives and to its reference figures' (hosts_page: also a link to the hosts
    page, which is in the book)."""
    title = "Datasets"
    sid = nodes.make_id(f"{SECTION_ID}-{data.chapter}")
    sec = nodes.section("", ids=[sid], names=[sid], classes=["perfbook-datasets"])
    document.ids[sid] = sec
    sec += nodes.title(title, title)
    nruns, nhosts = len(data.runs), len(data.hosts)
    size = sum(r.size() for r in data.runs)
    p = nodes.paragraph()
    p += nodes.Text("Each dataset is one archive, named after its run: ")
    p += nodes.literal(
        f"{SITE_DIR}/runs/<host>/<chapter>/<run>.zip", f"{SITE_DIR}/runs/<host>/<chapter>/<run>.zip"
    )
    p += nodes.Text(". Its paths start with ")
    p += nodes.literal("data/", "data/")
    p += nodes.Text(", so unzipping it at the top of a clone of the repository puts the run where ")
    p += nodes.literal("make notebooks", "make notebooks")
    p += nodes.Text(" reads it. The site holds each dataset once: this list has the chapter's own")
    if hosts_page:
        p += nodes.Text(", and ")
        p += _link("the hosts page", "hosts.html", "perfbook-hosts-link", code=False)
        p += nodes.Text(" links every host's")
    p += nodes.Text(".")
    sec += p
    p = nodes.paragraph()
    p += nodes.Text(
        f"This chapter has {nruns} run{'s' * (nruns != 1)} from {nhosts} "
        f"host{'s' * (nhosts != 1)} ({_human(size)} uncompressed)"
        if nruns
        else "No host has measured this chapter yet; run it in collect mode to add the "
        "first dataset"
    )
    if data.references:
        p += nodes.Text(
            ". The reference figures (the seed articles' and other published ones, "
            "with their provenance columns: "
        )
        p += nodes.Text(", ".join(ref.name for ref in data.references))
        p += nodes.Text(") are one archive: ")
        ref = reference_archive(data.chapter)
        p += _link(ref, f"{SITE_DIR}/{ref}")
    p += nodes.Text(".")
    sec += p
    if not data.runs:
        return sec
    hosts = nodes.bullet_list()
    names = data.labels()
    for host in data.hosts:
        runs = [r for r in data.runs if r.host == host]
        item = nodes.list_item()
        p = nodes.paragraph()
        # the machine's label, its id as the tooltip (an HTML-only section: see doctree-resolved)
        tip = f'<span class="pb-host" title="{html.escape(host)}">{html.escape(names[host])}</span>'
        p += nodes.raw("", tip, format="html")
        if runs[-1].description:
            p += nodes.Text(f" ({name_ids(runs[-1].description, names)})")
        p += nodes.Text(": ")
        for i, r in enumerate(runs):
            if i:
                p += nodes.Text(", ")
            p += _link(r.run_id, f"{SITE_DIR}/{r.archive}")
            p += nodes.Text(f" ({_run_facts(r)})")
        item += p
        hosts += item
    sec += hosts
    return sec


def measured_id(chapter: str) -> str:
    """The id of a chapter's part of the appendix (appendix.md#<id>)."""
    return nodes.make_id(f"measured-{chapter}")


def runs_table(chapter, data: ChapterData, data_dir: Path | None = None) -> str:
    """One row per dataset of a chapter: the machine (its label, the id as tooltip), the run,
    its profile, the time it took against the chapter's plan for that profile, its rounds and
    the rules that stopped them (perfbook.analysis.repetition), and whether the run monitor saw
    the machine disturbed. HTML, for the appendix."""
    reps, _ = repetition_overview(chapter.name, data_dir)
    names = data.labels()
    rows = []
    for r in data.runs:
        m = r.manifest
        mine = reps[(reps.host_id == r.host) & (reps.run_id == r.run_id)]
        ns = sorted({n for x in mine["n"].dropna() for n in str(x).split("–")}, key=int)
        rounds = "—" if not ns else ns[0] if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        rules = sorted({STOP_TEXT.get(str(w), str(w)) for w in mine["stopped_by"].dropna()})
        took, plan = m.seconds, chapter.plan_s.get(r.profile)
        cells = [
            machine(r.host, names),
            f'<a class="perfbook-dataset-archive" href="{html.escape(SITE_DIR + "/" + r.archive)}"'
            f">{html.escape(r.run_id)}</a>",
            html.escape(r.profile or "not recorded"),
            "—" if took is None else f"{took:.0f} s",
            "—" if plan is None else f"{plan} s",
            rounds,
            html.escape(", ".join(rules) or "—"),
            html.escape(verdict_text(m.get("disturbance"))),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "machine",
            "run",
            "profile",
            "took",
            "planned",
            "rounds",
            "stopped by",
            "disturbed",
        )
    )
    return (
        f'<table class="table perfbook-runs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def measured_section(
    chapter, docname: str, data: ChapterData, document, hosts_page: bool, data_dir=None
):
    """A chapter's part of the appendix: how each of its runs was measured, then its
    datasets (datasets_section)."""
    sid = measured_id(chapter.name)
    sec = nodes.section("", ids=[sid], names=[sid], classes=["perfbook-datasets"])
    document.ids[sid] = sec
    title = chapter.title or chapter.name
    sec += nodes.title(title, title)
    p = nodes.paragraph()
    p += nodes.Text("The chapter: ")
    p += _link(title, f"{docname}.html", "perfbook-chapter-link", code=False)
    plans = ", ".join(f"{k} {v} s" for k, v in chapter.plan_s.items())
    p += nodes.Text(
        f". Its plan on the book's 2-CPU host: {plans}. " if plans else ". It declares no plan. "
    )
    p += nodes.Text(
        "Each run below: the machine, the profile, the time the run took and the time its "
        "profile is planned to take, the rounds it measured (a range over its experiments) and "
        "the rules that stopped them, and whether the run monitor saw the machine disturbed "
        "(a disturbed run is never quoted)."
    )
    sec += p
    if data.runs:
        sec += nodes.raw("", runs_table(chapter, data, data_dir), format="html")
    sec += datasets_section(data, document, hosts_page=hosts_page)
    return sec


def pointer_section(chapter, document) -> nodes.section:
    """The end of a chapter page: where its plumbing is (its part of the appendix)."""
    sid = "measured" if "measured" not in document.ids else "measured-here"
    sec = nodes.section("", ids=[sid], names=[sid], classes=["perfbook-datasets"])
    document.ids[sid] = sec
    sec += nodes.title("How this was measured", "How this was measured")
    p = nodes.paragraph()
    p += nodes.Text(
        "Each run of this chapter, with its machine, profile, time taken against its plan, "
        "rounds and the rule that stopped them, whether the machine was disturbed, and each "
        "dataset's archive, is in the appendix: "
    )
    p += _link(
        f"How this was measured: {chapter.title or chapter.name}",
        f"{APPENDIX_DOC}.html#{measured_id(chapter.name)}",
        "perfbook-measured-link",
        code=False,
    )
    p += nodes.Text(".")
    sec += p
    return sec


def _section(doctree, anchor: str):
    """The section of a page that carries `anchor` among its ids (a MyST label above its
    heading), else the page's first section."""
    sections = list(doctree.findall(nodes.section))
    return next((s for s in sections if anchor in s["ids"]), sections[0] if sections else doctree)


def _on_doctree_read(app, doctree) -> None:
    docname = app.env.docname
    sigs = getattr(app.env, "perfbook_dataset_sigs", {})
    top = next(iter(doctree.findall(nodes.section)), None)
    if docname == COMPARE_DOC:
        _section(doctree, COMPARE_ANCHOR).append(nodes.raw("", page_html(), format="html"))
        return
    if docname == APPENDIX_DOC:
        where = _section(doctree, APPENDIX_ANCHOR)
        docs = {c: d for d, c in chapter_docnames().items()}
        whole = hashlib.sha256()
        for c in CHAPTERS:
            data = chapter_data(c.name)
            whole.update(data.signature().encode())
            chapter = c.load()
            where.append(
                measured_section(
                    chapter, docs[c.name], data, doctree, HOSTS_DOC in app.env.found_docs
                )
            )
        sigs[docname] = whole.hexdigest()
        app.env.perfbook_dataset_sigs = sigs
        return
    chapter = chapter_docnames().get(docname)
    if not chapter:
        return
    sigs[docname] = chapter_data(chapter).signature()
    app.env.perfbook_dataset_sigs = sigs
    entry = next(c for c in CHAPTERS if c.name == chapter)
    (top if top is not None else doctree).append(pointer_section(entry.load(), doctree))


def _on_doctree_resolved(app, doctree, docname) -> None:
    html = getattr(app.builder, "format", "") == "html"
    for ref in list(doctree.findall(nodes.reference)):
        target = ref.get("perfbook_target")
        if not target:
            continue
        if html:
            path, hash_, anchor = target.partition("#")  # relative_uri drops a fragment
            ref["refuri"] = relative_uri(app.builder.get_target_uri(docname), path) + hash_ + anchor
    if not html:  # only the HTML output carries the files
        for sec in list(doctree.findall(nodes.section)):
            if "perfbook-datasets" in sec["classes"]:
                sec.parent.remove(sec)


def _on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    sigs = getattr(env, "perfbook_dataset_sigs", {})
    # the compare page follows the data and the machine that builds: read it again every time
    stale = [COMPARE_DOC] if COMPARE_DOC in env.found_docs else []
    if APPENDIX_DOC in env.found_docs and APPENDIX_DOC in sigs:
        whole = hashlib.sha256()
        for c in CHAPTERS:
            whole.update(chapter_data(c.name).signature().encode())
        if sigs[APPENDIX_DOC] != whole.hexdigest():
            stale.append(APPENDIX_DOC)
    for docname, chapter in chapter_docnames().items():
        if (
            docname in env.found_docs
            and docname in sigs
            and sigs[docname] != chapter_data(chapter).signature()
        ):
            stale.append(docname)
    return stale


def _on_env_purge_doc(app, env, docname) -> None:
    getattr(env, "perfbook_dataset_sigs", {}).pop(docname, None)


def _on_env_merge_info(app, env, docnames, other) -> None:
    sigs = getattr(env, "perfbook_dataset_sigs", {})
    sigs.update(
        {d: s for d, s in getattr(other, "perfbook_dataset_sigs", {}).items() if d in docnames}
    )
    env.perfbook_dataset_sigs = sigs


def _on_build_finished(app, exception) -> None:
    if exception is not None or getattr(app.builder, "format", "") != "html":
        return
    archives = site_archives()
    publish(
        Path(app.outdir),
        archives,
        progress=lambda items: status_iterator(
            items,
            "writing dataset archives... ",
            "darkgreen",
            len(items),
            app.verbosity,
            stringify_func=lambda a: a.name,
        ),
    )


def setup(app):
    app.connect("config-inited", _on_config_inited)
    app.connect("doctree-read", _on_doctree_read, priority=400)  # before the toc collector
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("env-get-outdated", _on_env_get_outdated)
    app.connect("env-purge-doc", _on_env_purge_doc)
    app.connect("env-merge-info", _on_env_merge_info)
    app.connect("build-finished", _on_build_finished)
    app.connect("html-page-context", _on_html_page_context, priority=900)
    return {
        "version": "1",
        "parallel_read_safe": True,
        "parallel_write_safe": True,
        "env_version": 1,
    }
