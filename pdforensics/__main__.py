from pdforensics.cli import main

main()
