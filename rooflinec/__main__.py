from rooflinec.cli.app import main

main()
