// Package browsertest tests the dashboard (package dashboard) in a real
// headless Chromium, driven by chromedp: a module of its own, so that the
// core module gains no dependency. The tests skip, saying so, on a machine
// without chromium (.ci/run installs Debian's).
//
// TestScreenshot makes the picture of docs/dashboard.md on every run (CI
// included), into a temporary file; with RESILIENCEKIT_DASHBOARD_SCREENSHOT
// set to a file name, it writes it there:
//
//	cd dashboard/browsertest && RESILIENCEKIT_DASHBOARD_SCREENSHOT=$PWD/../../docs/dashboard.png go test -run Screenshot .
package browsertest
