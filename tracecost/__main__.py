from tracecost.cli import main

main()
