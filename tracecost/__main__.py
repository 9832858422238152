from tracecost import main

main()
