from rooflinec.cli import main

main()
