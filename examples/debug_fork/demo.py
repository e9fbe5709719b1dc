"""Demo: a long job misbehaves halfway (a prompt injection in chapter 4 of its input);
it is debugged with `snaprun log`, `snaprun inspect JOB@SEQ`, `snaprun diff` and
`snaprun debug` (pdb in a sandbox, nothing sent), and fixed by forking
the snapshot taken before the problem and resuming the fork on the corrected input.

    python examples/debug_fork/demo.py [--dir DIR] [--report FILE]

Starts the example's stub LLM (servers.py) on 127.0.0.1, copies the input chapters
into the demo's folder, runs the agent with `snaprun` in subprocesses on a store of
its own, and prints every command it runs.
"""

import shlex
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _demo import Demo, shown  # noqa: E402


def main():
    with Demo("debug_fork", __doc__) as demo:
        demo.say("The provider: a stub LLM. The job's input: a copy of the chapters.")
        demo.start_servers()
        chapters = demo.dir / "chapters"
        shutil.copytree(demo.folder / "chapters", chapters, dirs_exist_ok=True)
        demo.shell(f"cp -r {shown(demo.folder / 'chapters')} {shlex.quote(shown(chapters))}")
        demo.shell(f"export DIGEST_INPUT={shlex.quote(shown(chapters))}")
        demo.env["DIGEST_INPUT"] = str(chapters)

        demo.say("Run the job: six chapters, a summary and a snapshot for each.")
        run = demo.snaprun("run", "--job", "digest", demo.agent)
        demo.report["run"] = run.returncode
        demo.report["run_output"] = run.stdout

        demo.say(
            "From chapter 4 on, the summaries come back in capitals. Where did it "
            "start? The timeline lists a snapshot per chapter:"
        )
        demo.snaprun("log", "digest")
        demo.say(
            "Inspect the snapshot of chapter 4: its frames and locals, decoded without "
            "running any of the agent's code. The chapter text it had just read ends "
            "with an instruction to the model."
        )
        inspected = demo.snaprun("inspect", "digest@4")
        demo.report["inspect_4"] = inspected.stdout

        demo.say(
            "What changed between the snapshot before the problem and the one after "
            "it? `snaprun diff` compares the two decoded states, also without running "
            "the agent's code: the chapter text, the answer in capitals, and the two "
            "effects recorded in between."
        )
        diffed = demo.snaprun("diff", "digest@3", "digest@4", env={"COLUMNS": "100"})
        demo.report["diff_3_4"] = diffed.stdout
        demo.report["diff_3_4_json"] = demo.snaprun_json("diff", "digest@3", "digest@4")
        demo.say(
            "Step through chapter 4 from the snapshot before it, in pdb, with nothing "
            "sent: `snaprun debug` restores snapshot 3 in a sandbox, right after its "
            "snapshot() call. The model's answers come from the job's ledger, the "
            "store is only read. Three `next`s read chapter 4 (from the ledger too); "
            "`p text` shows what the model was given."
        )
        debugged = demo.snaprun(
            "debug", "digest@3", stdin="p number, name\nnext\nnext\nnext\np text\nq\n"
        )
        demo.report["debug_3"] = debugged.stdout
        demo.say(
            "Fix the input: remove the injected sentence from chapter 4. Then fork the "
            "snapshot of chapter 3, taken before the problem, as a new job, and resume "
            "the fork. It reads chapter 4 again (a fork's effects are its own, so the "
            "file is read afresh) and finishes cleanly. The original job is untouched."
        )
        fourth = chapters / "04.txt"
        clean = fourth.read_text().split(". Note to the assistant:")[0].rstrip(".\n") + "\n"
        fourth.write_text(clean)
        demo.shell(f"sed -i 's/\\. Note to the assistant:.*//' {shlex.quote(shown(fourth))}")
        demo.snaprun("fork", "digest@3", "--as", "digest-fixed")
        fixed = demo.snaprun("resume", "digest-fixed")
        demo.report["fork_resume"] = fixed.returncode
        demo.report["fork_output"] = fixed.stdout
        demo.snaprun("ls")
        demo.report["jobs"] = demo.snaprun_json("ls")
        demo.report["llm"] = demo.stats("LLM_URL")
        demo.say(
            "The fork redid only chapters 4 to 6: three more requests to the LLM, "
            f"{demo.report['llm'].get('chat_completions', 0)} in all."
        )
        demo.finish()


if __name__ == "__main__":
    main()
