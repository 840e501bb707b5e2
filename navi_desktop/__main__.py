from navi_desktop.cli import main

raise SystemExit(main())
