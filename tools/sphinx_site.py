"""The book's own Sphinx extension (loaded from _config.yml, sphinx: local_extensions).

Two things the published site needs that no chapter notebook should have to carry:

* **Datasets on every chapter page.** Each chapter registered in tools/chapters.py gets a
  "Datasets" section at its end, with a link to one archive of everything the chapter reads
  (``data/runs/*/<chapter>/`` of every host, and ``data/reference/<chapter>*.csv``) and a link to
  each raw file of each run. The files are written into the HTML output when the build finishes:
  ``datasets/<chapter>.zip`` (deterministic: sorted members, fixed timestamps; its paths start with
  ``data/`` so that unzipping it at the top of a clone merges it into ``data/``) and
  ``datasets/runs/...``, ``datasets/reference/...``, which mirror ``data/``.
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
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes

SITE_DIR = "datasets"
ENV_URL = "PERFBOOK_REPOSITORY_URL"
ENV_BRANCH = "PERFBOOK_REPOSITORY_BRANCH"
SECTION_ID = "datasets"
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
    from sphinx.errors import ConfigError
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

@dataclass
class Run:
    host: str
    run_id: str
    path: Path                      # data/runs/<host>/<chapter>/<run>
    description: str = ""
    profile: str = ""
    files: list[str] = field(default_factory=list)   # relative to path, sorted


@dataclass
class ChapterData:
    chapter: str
    runs: list[Run]
    references: list[Path]          # data/reference/<chapter>*.csv (the seed's, published ones)

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.runs})

    def members(self) -> list[tuple[Path, str]]:
        """(source file, path inside the archive and under datasets/), sorted by the latter."""
        out = []
        for r in self.runs:
            for f in r.files:
                out.append((r.path / f, f"runs/{r.host}/{self.chapter}/{r.run_id}/{f}"))
        for ref in self.references:
            out.append((ref, f"reference/{ref.name}"))
        return sorted(out, key=lambda m: m[1])

    def signature(self) -> str:
        """Changes when any file is added, removed or rewritten (for incremental builds)."""
        h = hashlib.sha256()
        for src, rel in self.members():
            st = src.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()


def chapter_docnames() -> dict[str, str]:
    """Sphinx docname -> chapter name, for every registered chapter."""
    from .chapters import CHAPTERS
    return {c.notebook.removesuffix(".ipynb"): c.name for c in CHAPTERS}


def _visible_files(run: Path) -> list[str]:
    """A run's files, relative to it, the manifest first; hidden files are left out."""
    rel = [p.relative_to(run).as_posix() for p in run.rglob("*")
           if p.is_file() and not any(part.startswith(".") for part in p.relative_to(run).parts)]
    return sorted(rel, key=lambda f: (f != "manifest.json", f))


def chapter_data(chapter: str, data_dir: Path | None = None) -> ChapterData:
    from .dataset import list_runs, load_manifest
    from .errors import DatasetError
    from .paths import reference_dir
    runs = []
    for path in list_runs(chapter, data_dir):
        try:
            man = load_manifest(path)
        except (OSError, ValueError) as e:
            raise DatasetError(f"unreadable manifest in {path}: {e}") from None
        runs.append(Run(host=path.parent.parent.name, run_id=path.name, path=path,
                        description=str((man.get("host") or {}).get("description") or ""),
                        profile=str(man.get("profile") or ""),
                        files=_visible_files(path)))
    refs = sorted(p for p in reference_dir(data_dir).glob(f"{chapter}*.csv") if p.is_file())
    return ChapterData(chapter, runs, refs)


def write_archive(dest: Path, members: list[tuple[Path, str]], prefix: str = "data/") -> Path:
    """A zip whose bytes depend only on the members' names and contents."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w") as z:
            for src, rel in sorted(members, key=lambda m: m[1]):
                info = zipfile.ZipInfo(prefix + rel, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                info.create_system = 3
                z.writestr(info, src.read_bytes())
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def publish(outdir: Path, data: ChapterData) -> Path:
    """Write the chapter's archive and a copy of each raw file under outdir/datasets/."""
    site = Path(outdir) / SITE_DIR
    members = data.members()
    for src, rel in members:
        dst = site / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return write_archive(site / f"{data.chapter}.zip", members)


def _human(nbytes: int) -> str:
    return f"{nbytes / 1024:.0f} kB" if nbytes < 1024 * 1024 else f"{nbytes / 1024 / 1024:.1f} MB"


def _link(text: str, target: str, cls: str = "") -> nodes.reference:
    """A link to datasets/<target>; its URI is made relative for each builder later."""
    ref = nodes.reference("", "", nodes.literal(text, text), internal=False,
                          refuri=f"{SITE_DIR}/{target}")
    ref["perfbook_dataset"] = f"{SITE_DIR}/{target}"
    ref["classes"].append("perfbook-dataset-link")
    if cls:
        ref["classes"].append(cls)
    return ref


def datasets_section(data: ChapterData, document) -> nodes.section:
    title = "Datasets"
    sid = SECTION_ID if SECTION_ID not in document.ids else f"{SECTION_ID}-download"
    sec = nodes.section("", ids=[sid], names=[sid], classes=["perfbook-datasets"])
    document.ids[sid] = sec
    sec += nodes.title(title, title)
    nruns, nhosts = len(data.runs), len(data.hosts)
    size = sum(src.stat().st_size for src, _ in data.members())
    what = (f"{nruns} run{'s' * (nruns != 1)} from {nhosts} host{'s' * (nhosts != 1)}"
            if nruns else "no measured run yet")
    if data.references:
        what += " and the reference figures (the seed articles' and other published ones)"
    p = nodes.paragraph()
    p += nodes.Text("Everything this chapter reads, as committed: ")
    p += _link(f"{data.chapter}.zip", f"{data.chapter}.zip", "perfbook-dataset-archive")
    p += nodes.Text(f" ({what}; {_human(size)} uncompressed). Its paths start with ")
    p += nodes.literal("data/", "data/")
    p += nodes.Text(", so unzipping it at the top of a clone of the repository puts the runs "
                    "where ")
    p += nodes.literal("make notebooks", "make notebooks")
    p += nodes.Text(" reads them.")
    sec += p
    if data.references:
        p = nodes.paragraph()
        p += nodes.Text("The reference figures, with their provenance columns: ")
        for i, ref in enumerate(data.references):
            p += nodes.Text(", " if i else "")
            p += _link(f"reference/{ref.name}", f"reference/{ref.name}")
        p += nodes.Text(".")
        sec += p
    if not data.runs:
        sec += nodes.paragraph(text="No host has measured this chapter yet; run it in collect "
                                    "mode to add the first dataset.")
        return sec
    hosts = nodes.bullet_list()
    for host in data.hosts:
        runs = [r for r in data.runs if r.host == host]
        item = nodes.list_item()
        p = nodes.paragraph()
        p += nodes.Text("Host ")
        p += nodes.literal(host, host)
        if runs[-1].description:
            p += nodes.Text(f" ({runs[-1].description})")
        p += nodes.Text(":")
        item += p
        rl = nodes.bullet_list()
        for r in runs:
            ri = nodes.list_item()
            rp = nodes.paragraph()
            rp += nodes.Text(f"run {r.run_id}" + (f", profile {r.profile}" if r.profile else "") + ": ")
            for i, f in enumerate(r.files):
                if i:
                    rp += nodes.Text(", ")
                rp += _link(f, f"runs/{r.host}/{data.chapter}/{r.run_id}/{f}")
            ri += rp
            rl += ri
        item += rl
        hosts += item
    sec += hosts
    return sec


def _on_doctree_read(app, doctree) -> None:
    docname = app.env.docname
    chapter = chapter_docnames().get(docname)
    if not chapter:
        return
    data = chapter_data(chapter)
    sigs = getattr(app.env, "perfbook_dataset_sigs", {})
    sigs[docname] = data.signature()
    app.env.perfbook_dataset_sigs = sigs
    top = next(iter(doctree.findall(nodes.section)), None)
    (top if top is not None else doctree).append(datasets_section(data, doctree))


def _on_doctree_resolved(app, doctree, docname) -> None:
    from sphinx.util.osutil import relative_uri
    html = getattr(app.builder, "format", "") == "html"
    for ref in list(doctree.findall(nodes.reference)):
        target = ref.get("perfbook_dataset")
        if not target:
            continue
        if html:
            ref["refuri"] = relative_uri(app.builder.get_target_uri(docname), target)
    if not html:  # only the HTML output carries the files
        for sec in list(doctree.findall(nodes.section)):
            if "perfbook-datasets" in sec["classes"]:
                sec.parent.remove(sec)


def _on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    sigs = getattr(env, "perfbook_dataset_sigs", {})
    stale = []
    for docname, chapter in chapter_docnames().items():
        if docname in env.found_docs and docname in sigs and sigs[docname] != chapter_data(chapter).signature():
            stale.append(docname)
    return stale


def _on_env_purge_doc(app, env, docname) -> None:
    getattr(env, "perfbook_dataset_sigs", {}).pop(docname, None)


def _on_env_merge_info(app, env, docnames, other) -> None:
    sigs = getattr(env, "perfbook_dataset_sigs", {})
    sigs.update({d: s for d, s in getattr(other, "perfbook_dataset_sigs", {}).items() if d in docnames})
    env.perfbook_dataset_sigs = sigs


def _on_build_finished(app, exception) -> None:
    if exception is not None or getattr(app.builder, "format", "") != "html":
        return
    site = Path(app.outdir) / SITE_DIR
    if site.exists():
        shutil.rmtree(site)  # only what the current data holds
    for chapter in chapter_docnames().values():
        publish(Path(app.outdir), chapter_data(chapter))


def setup(app):
    app.connect("config-inited", _on_config_inited)
    app.connect("doctree-read", _on_doctree_read, priority=400)  # before the toc collector
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("env-get-outdated", _on_env_get_outdated)
    app.connect("env-purge-doc", _on_env_purge_doc)
    app.connect("env-merge-info", _on_env_merge_info)
    app.connect("build-finished", _on_build_finished)
    app.connect("html-page-context", _on_html_page_context, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 1}
