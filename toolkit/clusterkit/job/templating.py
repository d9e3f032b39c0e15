"""The templates' Jinja environment: one sandboxed environment with ``StrictUndefined`` (a missing
variable is a bug, not an empty string), ``keep_trailing_newline``, and a ``shell_quote`` filter
used for every value that reaches a shell.  A site may replace any built-in template by file name
(``templates:`` in the site config); the built-ins are the fallback.  Site templates are code from
a shared file, so they render in Jinja's sandbox (no attribute walks to Python internals); with a
site directory in play each artifact renders within a budget of ``TEMPLATE_SECONDS`` and
``TEMPLATE_MAX_BYTES``, and errors are one-line config errors (:mod:`clusterkit.job.render`).
"""

from __future__ import annotations

import os
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from clusterkit.config.schema import Site
from clusterkit.errors import ConfigError
from clusterkit.job import jobenv, template_budget
from clusterkit.job.comments import comment_text
from clusterkit.job.launchers import shell_join
from clusterkit.job.nccl import EnvVar


def builtin_templates_dir() -> Path:
    packaged = Path(__file__).resolve().parents[1] / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "templates"  # source checkout


def shell_quote(value: Any) -> str:
    """Quote one value for bash (shlex.quote, plus quotes around a leading '=' that reads like '==')."""
    text = str(value)
    quoted = shlex.quote(text)
    if quoted == text and text.startswith("="):
        quoted = f"'{text}'"
    return quoted


def slurm_pattern(path: str) -> str:
    """A literal path inside a Slurm filename pattern: '%' must be written '%%'."""
    return path.replace("%", "%%")


#: Wall-clock budget for rendering one site template, in seconds.
TEMPLATE_SECONDS = 2.0
#: Largest output of one site template, in bytes.
TEMPLATE_MAX_BYTES = 1024 * 1024


class _BudgetExceeded(Exception):
    pass


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The immutable sandbox (a template cannot change the dicts and lists it is handed, such as
    the plan's artifact map), plus a size check on '*' and '**' (``'x' * 10**9``)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise _BudgetExceeded(f"exponent {right} is too large")
        if operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
            left, right = right, left
        if (operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int)
                and len(left) * right > TEMPLATE_MAX_BYTES):
                raise _BudgetExceeded(f"output larger than {TEMPLATE_MAX_BYTES} bytes")
        return super().call_binop(context, operator, left, right)


def _bytecode_cache(site: bool = False) -> jinja2.BytecodeCache | None:
    """Compiled templates, kept between runs (compiling job.sbatch.j2 costs ~30 ms per render).

    Jinja's own per-user directory (``$TMPDIR/_jinja2-cache-<uid>``): it creates it 0700 and
    refuses one owned by another user or open to others, as bytecode read from there runs.
    Without a safe directory templates are compiled each time.
    """
    try:
        # clusterkit's own file names: the sandbox compiles '*' and '**' into budget checks, so
        # bytecode another Jinja program compiled from the same file must not be taken for ours
        # (a site environment compiles unoptimized: its bytecode is kept apart from the built-ins')
        return jinja2.FileSystemBytecodeCache(pattern=f"__clusterkit_{'site' if site else 'sandbox'}_%s.cache")
    except (OSError, RuntimeError):
        return None


@lru_cache(maxsize=8)
def environment(override_dir: str | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if override_dir:
        loaders.append(jinja2.FileSystemLoader(override_dir))
    loaders.append(jinja2.FileSystemLoader(str(builtin_templates_dir())))
    env = _Sandbox(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(bool(override_dir)),
        **(template_budget.SITE_OPTIONS if override_dir else {}),
    )
    if override_dir:   # '%' checked like '*' (and so never folded at compile time)
        env.intercepted_binops = frozenset({*env.intercepted_binops, "%"})
        env.binop_table = {**env.binop_table, "%": template_budget.checked_mod}
    env.filters["shell_quote"] = shell_quote
    env.filters["shell_join"] = shell_join
    env.filters["slurm_pattern"] = slurm_pattern
    env.filters["env_word"] = env_word
    env.filters["comment_text"] = comment_text
    return env


def env_word(var: EnvVar) -> str:
    """An environment value as one shell word: a job's own value keeps its ``${SLURM_*}``/``${CK_*}``
    references for the shell that exports it; every other value is literal."""
    if var.shell is not None:   # a policy value that expands at run time (per-job log names)
        return var.shell
    return jobenv.shell_word(var.value, var.name) if var.source == "job" else shell_quote(var.value)


def overridden(site: Site) -> list[str]:
    """The built-in templates the site replaces with its own (empty without ``templates:``)."""
    if not site.templates:
        return []
    builtin = {p.name for p in builtin_templates_dir().iterdir()}
    return sorted(p.name for p in Path(site.templates).iterdir() if p.name in builtin)


def override_note(site: Site) -> str | None:
    """One line naming the site's own templates, for `sites show` and `submit --dry-run`."""
    names = overridden(site)
    return f"site {site.name} renders its own templates from {site.templates}: {', '.join(names) or 'none in use'}" \
        if site.templates else None


def _renderer(env: jinja2.Environment, override_dir: str | None) -> Any:
    """Render one template by name.  With a site's own templates in play (the entry or any
    template it includes may be one), the whole rendering runs within the budget."""

    def draw(name: str, ctx: dict[str, Any]) -> str:
        if override_dir is None:
            return _load(env, name, override_dir).render(ctx)
        return _render_bounded(lambda: _load(env, name, override_dir), ctx, name, override_dir)

    return draw


def _load(env: jinja2.Environment, name: str, override_dir: str | None) -> jinja2.Template:
    try:
        return env.get_template(name)
    except jinja2.TemplateSyntaxError as exc:
        raise _template_error(exc.filename or name, exc.lineno, f"template syntax error: {exc.message}") from None
    except (jinja2.TemplateError, UnicodeDecodeError) as exc:
        raise _template_error(str(Path(override_dir or "") / name), None, f"cannot load template: {exc}") from None


def _template_error(file: str, line: int | None, message: str) -> ConfigError:
    return ConfigError.single(file, line, "templates", message.splitlines()[0] if message else "template error")


def _render_bounded(load: Any, ctx: dict[str, Any], name: str, override_dir: str) -> str:
    # errors name the site's own file where it is known, else the site's template directory
    file = os.path.join(override_dir, name) if os.path.isfile(os.path.join(override_dir, name)) else override_dir
    parts: list[str] = []
    size = 0
    try:   # compiling is inside the budget too: Jinja evaluates what it can while it compiles
        with template_budget.deadline(TEMPLATE_SECONDS), template_budget.memory_cap():
            template = load()
            for chunk in template_budget.chunks(template.generate(ctx), TEMPLATE_SECONDS):
                size += len(chunk.encode("utf-8"))
                if size > TEMPLATE_MAX_BYTES:
                    raise _BudgetExceeded(f"output larger than {TEMPLATE_MAX_BYTES} bytes")
                parts.append(chunk)
    except (_BudgetExceeded, template_budget.OverBudget, MemoryError) as exc:
        where = _template_line(exc, file, override_dir)[0]
        raise _template_error(where, None, f"template over its budget ({TEMPLATE_SECONDS:g} s, "
                                           f"{TEMPLATE_MAX_BYTES // 1024} KiB out, "
                                           f"{template_budget.TEMPLATE_MEMORY >> 20} MiB of memory): "
                                           f"{exc or 'out of memory'}") from None
    except jinja2.TemplateSyntaxError as exc:   # an included template, loaded as it is reached
        raise _template_error(exc.filename or file, exc.lineno, f"template syntax error: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise _template_error(*_template_line(exc, file, override_dir), f"template error: {exc}") from None
    except (ArithmeticError, TypeError, ValueError, LookupError, RecursionError) as exc:
        raise _template_error(*_template_line(exc, file, override_dir),
                              f"template error: {type(exc).__name__}: {exc}") from None
    return "".join(parts)


def _template_line(exc: BaseException, file: str, override_dir: str) -> tuple[str, int | None]:
    """The site template and line, from the frames Jinja rewrites to point into template files
    (the innermost frame in one of the site's files: an include of its own, or the entry)."""
    tb = exc.__traceback__
    where: tuple[str, int | None] = (file, None)
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name == file or name.startswith(override_dir + os.sep):
            where = (name, tb.tb_lineno)
        tb = tb.tb_next
    return where
