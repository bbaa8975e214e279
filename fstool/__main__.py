from fstool.cli.main import main

main()
