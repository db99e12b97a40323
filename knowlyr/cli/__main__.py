from knowlyr.cli import main

main()
