from hypnos.cli.main import main

main()
