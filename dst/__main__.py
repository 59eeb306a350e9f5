from dst.cli import main

main()
