"""The canonical-action mapping (adakit.importers.mapping): one test per rule of the table,
and the hard shell forms. Every expected file, range and count is worked out by hand from
the command and its observation."""

from __future__ import annotations

import pytest

from adakit.importers.base import PathResolver
from adakit.importers.mapping import MAPPING_TABLE, RULES, Context, map_shell, map_tool
from adakit.importers.shell import parse_command, split_words

#: A pretend world: file -> number of lines (folders are their parents).
LINES = {"src/pkg/app.py": 400, "src/pkg/util.py": 120, "src/pkg/sub/deep.py": 60,
         "README.md": 30}


class FakeWorld:
    def files(self) -> list[str]:
        return sorted(LINES)

    def line_count(self, rel: str) -> int:
        return LINES[rel]


def ctx(world: bool = False, cwd: str = "/testbed", **kw) -> Context:
    res = PathResolver("/testbed", FakeWorld() if world else None)
    return Context(cwd=cwd, resolve=res, is_dir=res.is_dir, line_count=res.line_count, **kw)


def shell(cmd: str, obs: str = "", world: bool = False, **kw):
    return map_shell(cmd, obs, ctx(world, **kw))


def tool(name: str, args: dict, obs: str = "", world: bool = False, **kw):
    return map_tool(name, args, obs, ctx(world, **kw))


def lines(n: int, start: int = 1, style: str = "plain") -> str:
    if style == "tab":
        return "".join(f"{i:6}\tcode {i}\n" for i in range(start, start + n))
    if style == "colon":
        return "".join(f"{i}:code {i}\n" for i in range(start, start + n))
    return "".join(f"code {i}\n" for i in range(start, start + n))


def window(path: str, a: int, b: int, total: int) -> str:
    return (f"[File: /testbed/{path} ({total} lines total)]\n({a - 1} more lines above)\n"
            + lines(b - a + 1, a, "colon") + f"({total - b} more lines below)\n")


# --------------------------------------------------------------------------- named tools


def test_tool_open_reads_the_window_shown():
    m = tool("open", {"path": "src/pkg/app.py", "line_number": "200"},
             window("src/pkg/app.py", 150, 249, 400))
    assert (m.tool, m.rule, m.file, m.ranges, m.lines_viewed) == (
        "PKR", "tool:open", "src/pkg/app.py", [(150, 249)], 100)


def test_tool_goto_uses_the_header_not_the_argument():
    m = tool("goto", {"line_number": "390"}, window("src/pkg/app.py", 301, 400, 400),
             open_file="src/pkg/util.py")
    assert (m.rule, m.file, m.ranges) == ("tool:goto", "src/pkg/app.py", [(301, 400)])


def test_tool_scroll_without_a_window_is_a_failed_read():
    m = tool("scroll_down", {}, "No file open. Use the open command first.")
    assert (m.tool, m.rule, m.ranges) == ("PKR", "tool:scroll", [])
    assert m.failed


def test_tool_view_records_the_expanded_range_actually_shown():
    # asked for 100-120, the editor widened the window to the enclosing function: 96-131
    obs = "Here's the result of running `cat -n` on /testbed/src/pkg/app.py:\n" + lines(36, 96, "tab")
    m = tool("str_replace_editor", {"command": "view", "path": "/testbed/src/pkg/app.py",
                                    "view_range": [100, 120]}, obs)
    assert (m.tool, m.rule, m.file, m.ranges, m.lines_viewed) == (
        "PKR", "tool:view", "src/pkg/app.py", [(96, 131)], 36)


def test_tool_view_without_numbers_takes_the_arguments():
    m = tool("read_file", {"path": "src/pkg/util.py", "start_line": 10, "end_line": 30}, lines(21, 10))
    assert (m.rule, m.file, m.ranges) == ("tool:view", "src/pkg/util.py", [(10, 30)])


def test_tool_view_outline_for_an_abbreviated_file():
    obs = ("<NOTE>This file is too large to display entirely. Showing abbreviated version.</NOTE>\n"
           "     1 import os\n    40 def main():\n")
    m = tool("str_replace_editor", {"command": "view", "path": "/testbed/src/pkg/app.py"}, obs)
    assert (m.tool, m.rule, m.file, m.structural, m.ranges) == (
        "OVW", "tool:view_outline", "src/pkg/app.py", True, [])
    assert tool("filemap", {"path": "src/pkg/app.py"}, "def main(): ...").rule == "tool:view_outline"


def test_tool_view_dir_is_an_outline_of_the_folder():
    obs = "Here's the files and directories up to 2 levels deep in /testbed/src, excluding hidden items:\n"
    m = tool("str_replace_editor", {"command": "view", "path": "/testbed/src"}, obs)
    assert (m.tool, m.rule, m.file, m.structural) == ("OVW", "tool:view_dir", "src", True)
    assert tool("list_dir", {"path": "/testbed"}, "a\nb").file == "."


def test_tool_search_dir_counts_and_detects_definitions():
    obs = ('Found 7 matches for "helper" in /testbed/src:\n/testbed/src/pkg/app.py (5 matches)\n'
           '/testbed/src/pkg/util.py (2 matches)\nEnd of matches for "helper" in /testbed/src\n')
    m = tool("search_dir", {"search_term": "helper", "dir": "src"}, obs)
    assert (m.tool, m.rule, m.action, m.symbol, m.result_count, m.file) == (
        "EXP", "tool:search_dir", "find_all_references", "helper", 7, None)
    d = tool("search_dir", {"search_term": "def helper"}, 'Found 1 matches for "def helper" in /testbed:\n')
    assert (d.action, d.symbol, d.result_count) == ("go_to_definition", "helper", 1)
    none = tool("search_dir", {"search_term": "zzz"}, 'No matches found for "zzz" in /testbed')
    assert none.result_count == 0 and not none.failed


def test_tool_search_file_searches_the_open_file():
    obs = 'Found 2 matches for "x" in /testbed/src/pkg/util.py:\nLine 3: x\nLine 9: x\n'
    m = tool("search_file", {"search_term": "x"}, obs, open_file="src/pkg/util.py")
    assert (m.rule, m.file, m.result_count) == ("tool:search_file", "src/pkg/util.py", 2)
    named = tool("search_file", {"search_term": "x", "file": "src/pkg/app.py"}, obs)
    assert named.file == "src/pkg/app.py"


def test_tool_find_file_is_a_reference_search_by_name():
    obs = 'Found 1 matches for "util.py" in /testbed:\n/testbed/src/pkg/util.py\n'
    m = tool("find_file", {"file_name": "util.py"}, obs)
    assert (m.tool, m.rule, m.action, m.symbol, m.result_count) == (
        "EXP", "tool:find_file", "find_all_references", "util.py", 1)


def test_tool_edit_kinds_and_files():
    m = tool("str_replace_editor", {"command": "str_replace", "path": "/testbed/src/pkg/app.py",
                                    "old_str": "a", "new_str": "b"}, "The file has been edited.")
    assert (m.tool, m.rule, m.action, m.file, m.ranges) == (
        "EDT", "tool:edit", "str_replace", "src/pkg/app.py", [])
    swe = tool("edit", {"action": "edit 3:4\nx\nend_of_edit"}, window("src/pkg/util.py", 1, 100, 120)
               + "File updated.")
    assert (swe.action, swe.file) == ("edit", "src/pkg/util.py")
    assert tool("create", {"path": "repro.py"}, "[File: /testbed/repro.py (1 lines total)]").file == "repro.py"


def test_tool_submit_is_terminal():
    m = tool("submit", {}, "diff --git a/x b/x")
    assert (m.tool, m.rule, m.finalize, m.action) == ("SUB", "tool:submit", True, "submit")
    assert tool("finish", {"final_thought": "done"}).tool == "SUB"
    assert tool("exit_forfeit", {}).action == "forfeit"


def test_tool_think_is_a_memory():
    m = tool("think", {}, "Your thought has been logged.")
    assert (m.tool, m.rule) == ("MEM", "tool:think")


def test_tool_message_is_an_interim_conclusion():
    m = tool("message", {"content": "I found it."})
    assert (m.tool, m.rule, m.finalize) == ("CON", "tool:message", False)


def test_tool_bash_goes_through_the_shell_rules():
    m = tool("bash", {"command": "cat src/pkg/util.py"}, lines(120))
    assert (m.tool, m.rule, m.ranges) == ("PKR", "shell:cat", [(1, 120)])
    empty = tool("bash", {"command": "  "})
    assert (empty.rule, empty.failed) == ("tool:bash", True)


def test_tool_execute_for_code_and_browsing_and_unknown_tools():
    for name in ("run_ipython", "browse", "some_tool_nobody_knows"):
        m = tool(name, {"code": "print(1)"}, "1")
        assert (m.tool, m.rule, m.action) == ("EXE", "tool:execute", name)


# --------------------------------------------------------------------------- shell rules


def test_shell_ls_lists_a_folder_relative_to_cwd():
    m = shell("ls -la pkg", "a.py\nb.py\nc.py\n", cwd="/testbed/src")
    assert (m.tool, m.rule, m.file, m.structural, m.result_count) == ("OVW", "shell:ls", "src/pkg", True, 3)
    assert shell("ls").file == "."
    assert shell("git ls-files", "a\nb\n").rule == "shell:ls"


def test_shell_find_walks_the_tree():
    m = shell("find src -type f", "src/a.py\nsrc/b.py\n")
    assert (m.tool, m.rule, m.file) == ("OVW", "shell:find", "src")


def test_shell_find_name_is_a_search_like_find_file():
    m = shell("find . -name '*.py' -not -path './.git/*'", "./a.py\n./b.py\n./c/d.py\n")
    assert (m.tool, m.rule, m.action, m.symbol, m.result_count) == (
        "EXP", "shell:find_name", "find_all_references", "*.py", 3)


def test_shell_stat_sizes_are_structure():
    m = shell("wc -l src/pkg/app.py", "400 src/pkg/app.py\n")
    assert (m.tool, m.rule, m.file) == ("OVW", "shell:stat", "src/pkg/app.py")


def test_shell_cat_whole_file_range_from_the_output_or_the_world():
    assert shell("cat src/pkg/util.py", lines(120)).ranges == [(1, 120)]
    # the scaffold cut the output: only a world says how long the file is
    cut = shell("cat src/pkg/app.py", lines(50) + "...\n" + lines(50, 351), output_complete=False)
    assert cut.ranges == [] and cut.lines_viewed == 101
    known = shell("cat src/pkg/app.py", lines(50), world=True, output_complete=False)
    assert known.ranges == [(1, 400)] and known.lines_viewed == 400
    numbered = shell("cat -n src/pkg/util.py", lines(120, 1, "tab"))
    assert (numbered.rule, numbered.ranges) == ("shell:cat", [(1, 120)])


def test_shell_head_and_tail():
    assert shell("head -n 25 src/pkg/app.py", lines(25)).ranges == [(1, 25)]
    assert shell("head -40 src/pkg/app.py", lines(40)).ranges == [(1, 40)]
    assert shell("head src/pkg/app.py", lines(10)).ranges == [(1, 10)]  # default 10
    short = shell("head -n 500 src/pkg/util.py", lines(120))  # the file ends first
    assert short.ranges == [(1, 120)]
    tail = shell("tail -n 20 src/pkg/app.py", lines(20))
    assert (tail.rule, tail.ranges, tail.lines_viewed) == ("shell:tail", [], 20)  # no world
    assert shell("tail -n 20 src/pkg/app.py", lines(20), world=True).ranges == [(381, 400)]
    assert shell("tail -n +390 src/pkg/app.py", lines(11)).ranges == [(390, 400)]


def test_shell_sed_n_quoted_and_unquoted_and_several_ranges():
    assert shell("sed -n '10,40p' src/pkg/app.py", lines(31)).ranges == [(10, 40)]
    assert shell("sed -n 10,40p src/pkg/app.py", lines(31)).ranges == [(10, 40)]
    assert shell('sed -n "7p" src/pkg/app.py', "code 7\n").ranges == [(7, 7)]
    assert shell("sed -n '390,$p' src/pkg/app.py", lines(11)).ranges == [(390, 400)]
    assert shell("sed -n '1,5p;20,22p' src/pkg/app.py", lines(8), world=True).ranges == [(1, 5), (20, 22)]
    # past the end of a 120-line file: what was shown
    assert shell("sed -n '100,200p' src/pkg/util.py", lines(21)).ranges == [(100, 120)]


def test_shell_nl_numbers_with_ba_only():
    m = shell("nl -ba src/pkg/app.py | sed -n '50,60p'", lines(11, 50, "tab"))
    assert (m.rule, m.ranges) == ("shell:nl", [(50, 60)])
    plain = shell("nl src/pkg/util.py", lines(120, 1, "tab"))
    assert (plain.rule, plain.ranges) == ("shell:nl", [(1, 120)])  # whole file, by line count


def test_shell_awk_nr_window():
    m = shell("awk 'NR>=5 && NR<=9' src/pkg/util.py", lines(5, 5))
    assert (m.tool, m.rule, m.ranges) == ("PKR", "shell:awk_nr", [(5, 9)])
    assert shell("awk 'NR==3,NR==4' src/pkg/util.py", lines(2, 3)).ranges == [(3, 4)]
    assert shell("awk '{print $1}' src/pkg/util.py", "x").tool == "EXE"


def test_shell_grep_counts_results_and_files():
    m = shell("grep -rn 'helper' src", "src/pkg/app.py:3:helper\nsrc/pkg/util.py:9:helper\n", exit_code=0)
    assert (m.tool, m.rule, m.action, m.symbol, m.result_count, m.file) == (
        "EXP", "shell:grep", "find_all_references", "helper", 2, None)
    one_file = shell("grep -n helper src/pkg/util.py", "9:helper\n")
    assert (one_file.file, one_file.result_count) == ("src/pkg/util.py", 1)
    nothing = shell("grep -rn zzz src", "", exit_code=1)
    assert nothing.result_count == 0 and not nothing.failed
    rg = shell("rg -n -g '*.py' -A 2 helper src", "src/pkg/app.py:3:helper\n")
    assert (rg.rule, rg.symbol, rg.result_count) == ("shell:grep", "helper", 1)
    git = shell("git grep -n helper", "src/pkg/app.py:3:helper\n")
    assert (git.rule, git.symbol) == ("shell:grep", "helper")
    counted = shell("grep -c helper src/pkg/app.py", "4\n")
    assert counted.result_count == 4


def test_shell_grep_def_is_a_definition_lookup_landing_on_its_line():
    m = shell('grep -rn "def make_thing" src', "src/pkg/util.py:42:def make_thing(x):\n")
    assert (m.rule, m.action, m.symbol, m.file, m.ranges) == (
        "shell:grep_def", "go_to_definition", "make_thing", "src/pkg/util.py", [(42, 42)])
    cls = shell("grep -n '^class Widget' src/pkg/app.py", "10:class Widget:\n")
    assert (cls.action, cls.symbol, cls.file) == ("go_to_definition", "Widget", "src/pkg/app.py")
    two = shell('grep -rn "def run" src', "src/a.py:1:def run\nsrc/b.py:2:def run\n")
    assert (two.file, two.ranges, two.result_count) == (None, [], 2)


def test_shell_edit_forms():
    sed = shell("sed -i 's/a/b/g' src/pkg/app.py")
    assert (sed.tool, sed.rule, sed.action, sed.file) == ("EDT", "shell:edit", "sed -i", "src/pkg/app.py")
    redirect = shell("echo 'x = 1' >> src/pkg/util.py")
    assert (redirect.action, redirect.file) == ("write", "src/pkg/util.py")
    heredoc = shell("cat <<'EOF' > repro.py\nimport pkg\nprint(pkg)\nEOF")
    assert (heredoc.tool, heredoc.action, heredoc.file) == ("EDT", "write", "repro.py")
    tee = shell("printf 'a\\n' | tee notes.txt")
    assert (tee.tool, tee.file) == ("EDT", "notes.txt")
    assert shell("git apply fix.diff").action == "git apply"
    assert shell("rm repro.py").file == "repro.py"
    assert shell("mv a.py src/pkg/b.py").file == "src/pkg/b.py"
    assert shell("perl -pi -e 's/a/b/' src/pkg/app.py").tool == "EDT"


def test_shell_submit_forms():
    m = shell("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", "diff")
    assert (m.tool, m.rule, m.finalize) == ("SUB", "shell:submit", True)
    assert shell("echo MINI_SWE_AGENT_FINAL_OUTPUT").tool == "SUB"
    assert shell("submit").tool == "SUB"


def test_shell_execute_is_the_fallback():
    m = shell("python -m pytest tests -q", "3 passed", exit_code=0)
    assert (m.tool, m.rule, m.action) == ("EXE", "shell:execute", "python")
    assert shell("cd /testbed").tool == "EXE"  # nothing read or changed
    assert shell("git diff").action == "git"
    assert shell("python reproduce.py > out.txt").tool == "EXE"  # its output is the point


# --------------------------------------------------------------------------- hard shell forms


def test_pipes_narrow_the_range_and_turn_reads_into_searches():
    assert shell("cat src/pkg/app.py | head -n 30", lines(30)).ranges == [(1, 30)]
    assert shell("sed -n '100,200p' src/pkg/app.py | head -5", lines(5)).ranges == [(100, 104)]
    assert shell("head -n 60 src/pkg/app.py | tail -n 10", lines(10)).ranges == [(51, 60)]
    assert shell("cat -n src/pkg/app.py | sed -n '200,220p'", lines(21, 200, "tab")).ranges == [(200, 220)]
    search = shell("cat src/pkg/app.py | grep -n helper", "3:helper\n88:helper\n")
    assert (search.tool, search.file, search.symbol, search.result_count, search.ranges) == (
        "EXP", "src/pkg/app.py", "helper", 2, [])
    listed = shell("find . -name '*.py' | xargs grep -l helper", "./a.py\n./b.py\n")
    assert (listed.rule, listed.symbol, listed.result_count) == ("shell:grep", "helper", 2)
    counted = shell("grep -rn helper src | wc -l", "17\n")
    assert (counted.rule, counted.result_count) == ("shell:grep", 17)
    limited = shell("grep -rn helper src | head -3", "a:1:x\nb:2:x\nc:3:x\n")
    assert limited.result_count == 3


def test_and_chains_take_the_most_consequential_segment():
    read = shell("ls src && sed -n '10,20p' src/pkg/app.py", lines(11))
    assert (read.tool, read.ranges) == ("PKR", [(10, 20)])
    run = shell("sed -n '1,5p' src/pkg/app.py && python -m pytest -q", "ok")
    assert run.tool == "EXE"
    edit = shell("python -m pytest -q; sed -i 's/a/b/' src/pkg/util.py || true", "")
    assert (edit.tool, edit.file) == ("EDT", "src/pkg/util.py")
    assert shell("grep -n x src/pkg/app.py && cat src/pkg/util.py", lines(120)).tool == "PKR"


def test_quoted_paths_keep_their_spaces_and_quotes_go():
    m = shell('cat "docs/my notes.md"', lines(4))
    assert (m.file, m.ranges) == ("docs/my notes.md", [(1, 4)])
    s = shell("sed -n '3,4p' 'docs/a b.md'", lines(2))
    assert (s.file, s.ranges) == ("docs/a b.md", [(3, 4)])
    assert split_words('open "src/a b.py" 12') == ["open", "src/a b.py", "12"]


def test_cd_then_a_relative_path_resolves_from_the_new_folder():
    m = shell("cd src/pkg && sed -n '5,9p' util.py", lines(5))
    assert (m.file, m.ranges) == ("src/pkg/util.py", [(5, 9)])
    up = shell("cd src/pkg/sub && cat ../app.py | head -3", lines(3))
    assert up.file == "src/pkg/app.py"
    absolute = shell("cd /tmp && cat /testbed/README.md", lines(30))
    assert absolute.file == "README.md"


def test_code_that_mentions_errors_is_not_a_failed_read():
    obs = ("Here's the result of running `cat -n` on /testbed/src/pkg/app.py:\n"
           "     1\tmsg = 'File not found'\n     2\traise FileNotFoundError(msg)\n")
    view = tool("str_replace_editor", {"command": "view", "path": "/testbed/src/pkg/app.py"}, obs)
    assert (view.failed, view.ranges) == (False, [(1, 2)])
    cat = shell("cat src/pkg/util.py", "Error: not found is what we print\nsecond line\n")
    assert (cat.failed, cat.ranges) == (False, [(1, 2)])
    edit = tool("str_replace_editor", {"command": "str_replace", "path": "src/pkg/app.py"},
                "The file src/pkg/app.py has been edited.\n     1\tif not found: raise\n")
    assert not edit.failed
    missing = tool("str_replace_editor", {"command": "view", "path": "/testbed/nope.py"},
                   "The path /testbed/nope.py does not exist. Please provide a valid path.")
    assert missing.failed and missing.ranges == []


def test_paths_map_onto_the_world_by_suffix():
    m = shell("cat /workspace/owner__pkg__1.0/src/pkg/util.py", lines(120), world=True, cwd="/")
    assert m.file == "src/pkg/util.py"
    outside = shell("cat /usr/lib/python3/site.py", lines(3), world=True)
    assert outside.file == "/usr/lib/python3/site.py"  # outside the repository: kept absolute


def test_comments_heredocs_and_redirections_do_not_confuse_the_parser():
    segs = parse_command("python x.py 2>&1 | tail -5  # run it\nls src")
    assert [[s.program for s in seg.stages] for seg in segs] == [["python", "tail"], ["ls"]]
    assert shell("python - <<'EOF'\nopen('x', 'w').write('sed -i')\nEOF").tool == "EXE"
    failed = shell("cat missing.py", "cat: missing.py: No such file or directory\n", exit_code=1)
    assert (failed.tool, failed.failed, failed.ranges) == ("PKR", True, [])


#: One smallest example per rule: (tool name or None for a shell command, args or command,
#: observation). ``test_every_rule_has_an_example`` keeps it complete.
EXAMPLES: dict[str, tuple] = {
    "tool:open": ("open", {"path": "src/pkg/app.py"}, window("src/pkg/app.py", 1, 100, 400)),
    "tool:goto": ("goto", {"line_number": "50"}, window("src/pkg/app.py", 1, 100, 400)),
    "tool:scroll": ("scroll_up", {}, window("src/pkg/app.py", 1, 100, 400)),
    "tool:view": ("read", {"path": "src/pkg/app.py"}, lines(3, 1, "tab")),
    "tool:view_outline": ("filemap", {"path": "src/pkg/app.py"}, "def f(): ..."),
    "tool:view_dir": ("list_dir", {"path": "src"}, "pkg/"),
    "tool:search_dir": ("search_dir", {"search_term": "x"}, 'Found 1 matches for "x" in /testbed:'),
    "tool:search_file": ("search_file", {"search_term": "x"}, 'Found 1 matches for "x" in f:'),
    "tool:find_file": ("find_file", {"file_name": "a.py"}, 'Found 1 matches for "a.py" in /t:'),
    "tool:edit": ("insert", {"lines": "3"}, window("src/pkg/app.py", 1, 100, 400)),
    "tool:submit": ("submit", {}, ""),
    "tool:think": ("task_tracking", {}, ""),
    "tool:message": ("message", {"content": "hi"}, ""),
    "tool:bash": ("bash", {"command": ""}, ""),
    "tool:execute": ("delegate", {}, ""),
    "tool:read": ("Read", {"file_path": "src/pkg/app.py", "offset": 2, "limit": 2}, ""),
    "tool:grep": ("Grep", {"pattern": "todo"}, "Found 1 file\nsrc/a.py"),
    "tool:glob": ("Glob", {"pattern": "**/*.py"}, "src/a.py"),
    "tool:plan": ("TodoWrite", {"todos": [{"content": "read", "status": "pending"}]}, ""),
    "tool:chat_file": ("aider:add", {"path": "README.md"}, "Added README.md to the chat"),
    "tool:search_replace": ("aider:edit", {"path": "a.py", "search": "x = 1", "replace": "x = 2"},
                            "Applied edit to a.py"),
    "tool:subagent": ("Task", {"prompt": "find it", "subagent_type": "Explore"}, "found"),
    "tool:other": ("other", {"name": "ToolSearch"}, ""),
    "tool:recorded": ("adakit:recorded", {"file": "src/a.py"}, ""),
    "shell:ls": (None, "tree src", "src\n"),
    "shell:find": (None, "find .", ".\n"),
    "shell:find_name": (None, "find . -iname readme*", "./README.md\n"),
    "shell:stat": (None, "stat README.md", "File: README.md\n"),
    "shell:cat": (None, "less README.md", lines(30)),
    "shell:head": (None, "head -n 2 README.md", lines(2)),
    "shell:tail": (None, "tail README.md", lines(10)),
    "shell:sed_n": (None, "sed -n 2,3p README.md", lines(2)),
    "shell:nl": (None, "nl -ba README.md", lines(30, 1, "tab")),
    "shell:awk_nr": (None, "awk 'NR>=2 && NR<=3' README.md", lines(2)),
    "shell:grep": (None, "ag todo src", "src/a.py:1:todo\n"),
    "shell:grep_def": (None, "rg -n 'fn parse' src", "src/lib.rs:9:fn parse(\n"),
    "shell:edit": (None, "touch new.py", ""),
    "shell:submit": (None, "submit", ""),
    "shell:execute": (None, "make test", "ok"),
}


def test_aider_chat_files_are_whole_file_reads_with_a_world():
    m = tool("aider:read-only", {"path": "src/pkg/util.py"}, world=True)
    assert (m.tool, m.action, m.file, m.ranges, m.lines_viewed) == (
        "PKR", "whole_file", "src/pkg/util.py", [(1, 120)], 120)
    m = tool("aider:add", {"path": "src/pkg/util.py"})
    assert (m.tool, m.action, m.file, m.ranges) == ("PKR", "lines_unknown", "src/pkg/util.py", [])


def test_aider_edits_touch_the_lines_found_in_the_file():
    text = ["def f():", "    a = 1", "    return a", "", "def g():", "    pass"]
    res = PathResolver("/testbed", FakeWorld())
    c = Context(cwd="/testbed", resolve=res, read_lines=lambda rel: text if rel == "README.md" else None)
    edit = {"path": "README.md", "search": "    a = 1\n    return a", "replace": "    a = 2\n    return a"}
    assert map_tool("aider:edit", edit, "", c).ranges == [(2, 2)]
    applied = {**edit, "search": "def g():\n    return 0", "replace": "def g():\n    pass"}
    assert map_tool("aider:edit", applied, "", c).ranges == [(6, 6)]  # already in the file
    lost = {**edit, "search": "nowhere", "replace": "to be seen"}
    assert map_tool("aider:edit", lost, "", c).ranges == []
    m = map_tool("aider:edit", {**edit, "path": "other.py"}, "", c)
    assert (m.tool, m.file, m.ranges) == ("EDT", "other.py", [])  # no lines to look in


def test_every_rule_has_an_example():
    assert set(RULES) == {r.rule for r in MAPPING_TABLE}
    assert set(EXAMPLES) == set(RULES), sorted(set(RULES) ^ set(EXAMPLES))


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fires_on_its_example(rule_id):
    name, args, obs = EXAMPLES[rule_id]
    m = shell(args, obs) if name is None else tool(name, args, obs)
    assert m.rule == rule_id
    assert m.tool == RULES[rule_id].canonical or rule_id == "tool:bash"


@pytest.mark.parametrize("rule", MAPPING_TABLE, ids=lambda r: r.rule)
def test_every_rule_argues_its_choice(rule):
    assert rule.canonical in {"OVW", "PKR", "EXP", "MEM", "CON", "EDT", "EXE", "SUB"}
    assert len(rule.why) > 20 and rule.covers


def test_a_recorded_action_is_kept_and_junk_in_it_dropped():
    m = tool("adakit:recorded", {"tool": "BKM", "file": "src/a.py", "ranges": [[3, 9], [5, 2], "x",
                                                                             [1, None]],
                                 "symbol": "f", "result_count": "4", "finalize": "yes",
                                 "error_type": "repeat"}, "")
    assert (m.tool, m.file, m.ranges, m.lines_viewed, m.symbol, m.result_count) == (
        "BKM", "src/a.py", [(3, 9)], 7, "f", 4)
    assert m.finalize is None and m.failed and m.rule == "tool:recorded"
