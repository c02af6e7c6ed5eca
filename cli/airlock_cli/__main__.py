from airlock_cli.main import main

main()
