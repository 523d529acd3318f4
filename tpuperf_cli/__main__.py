from tpuperf_cli.cli import main

main()
