from grader.cli import main

main(prog_name="grader")
