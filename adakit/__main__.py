from adakit.cli import main

raise SystemExit(main())
