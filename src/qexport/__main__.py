from qexport.cli import main

main()
