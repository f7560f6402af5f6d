"""Importers: other agents' trajectories as adakit runs (issue 16).

``adakit import FORMAT PATH... --out DIR`` turns every trajectory file of a format into one
run file of adakit's record schema, so the lenses, the explorer and the judges read SWE-agent,
mini-swe-agent, OpenHands, Claude Code, Codex CLI, Inspect AI, aider or any agent's runs beside
Ada's. One module per format reads its files into a :class:`~adakit.importers.base.Trajectory`;
:mod:`~adakit.importers.mapping` maps every step onto a canonical tool;
:mod:`~adakit.importers.base` writes the records.

========================  ===================  ==========================================
format                    module               files
========================  ===================  ==========================================
``swe-agent``             ``swe_agent``        ``*.traj`` (command and function-calling style)
``mini-swe-agent``        ``mini_swe_agent``   ``*.traj.json`` (object with messages, or a list)
``openhands``             ``openhands``        ``*.json`` (event list, or ``history`` object),
                                               ``output.jsonl`` (one ``history`` record a line)
``generic``               ``generic``          ``*.jsonl`` (docs/importing.md)
``claude-code``           ``claude_code``      ``<session>.jsonl`` of ``~/.claude/projects``
                                               (CLI 1.0.x to 2.x; subagent ``agent-*.jsonl``)
``codex``                 ``codex``            ``rollout-*.jsonl`` of ``~/.codex/sessions``
                                               (wrapped ``payload`` lines, or early bare items)
``atif``                  ``atif``             ``*.json`` ATIF-v1.4 to v1.7 (Harbor's RFC 0001);
                                               ``adakit export atif`` writes it (``atif_export``)
``inspect``               ``inspect_log``      Inspect AI ``.eval`` zips and ``.json`` logs
                                               (one run per sample)
``aider``                 ``aider``            ``.aider.chat.history.md`` (one run per session)
``auto``                  (detected per file)  any of the above
========================  ===================  ==========================================

Bad input never stops a batch: a file in an unknown shape, truncated JSON or an empty
trajectory is skipped with a one-line reason, and the summary counts imports and skips by
reason; in a file of one record per line (an OpenHands ``output.jsonl``) every line is its
own run, imported or skipped on its own. A run file is written whole (to a temporary name,
then renamed), so nothing already imported is lost; a source whose sha256 is already in the
output folder is skipped, so importing again is idempotent.

Modules:

- :mod:`~adakit.importers.batch`: :func:`~adakit.importers.batch.import_paths`, the import
  report and the ``adakit import`` command;
- :mod:`~adakit.importers.formats`: the format registry, ``auto`` detection, reading one file;
- :mod:`~adakit.importers.base`: the :class:`~adakit.importers.base.Trajectory` every reader
  produces, and its records;
- :mod:`~adakit.importers.mapping` (with :mod:`~adakit.importers.shell`): the canonical-action
  mapping table;
- :mod:`~adakit.importers.corpora`: imported runs read beside launched ones (notebook 40);
- one reader per format: :mod:`~adakit.importers.swe_agent`,
  :mod:`~adakit.importers.mini_swe_agent`, :mod:`~adakit.importers.openhands`,
  :mod:`~adakit.importers.generic`, :mod:`~adakit.importers.claude_code`,
  :mod:`~adakit.importers.codex`, :mod:`~adakit.importers.atif`,
  :mod:`~adakit.importers.inspect_log`, :mod:`~adakit.importers.aider`;
- :mod:`~adakit.importers.atif_export`: runs written as ATIF (``adakit export atif``);
- :mod:`~adakit.importers.compiled`: the hot modules compiled with mypyc, loaded here, before
  any of them is imported, when a build of exactly these sources exists.
"""

from adakit.importers.compiled import install as _install_compiled

_install_compiled()
