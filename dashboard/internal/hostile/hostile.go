// Package hostile lists breaker and pipeline names that try to become
// markup, script, a selector, JSON, a template or a form field somewhere
// on their way to the dashboard's page, for the tests of package dashboard
// and of its browser tests (dashboard/browsertest).
package hostile

import "strings"

// Names are the hostile names, each different from the others, none of
// them empty.
var Names = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`'><svg onload=alert(1)>`,
	`javascript:alert(1)`,
	`</script><script>alert(1)</script>`,
	`it's "quoted"`,
	`'; alert(1); '`,
	`back\slash \" \\ \u0041`,
	"\u202Egnp.exe",   // a right-to-left override
	"nul\x00byte",     // a null byte
	"line\nbreak\r\n", // newlines, which end a server-sent event
	"data: {\"injected\":true}",
	`{{.}}`,
	`{{template "page"}}`,
	`.tile`,
	`#filter`,
	`[data-name="payments"]`,
	`*`,
	`{"name":"payments","mode":"normal"}`,
	`]}`,
	`payments&mode=disabled`,
	`&amp; &lt;b&gt;`,
	" payments ",
	"😀 \u0301combining",
	"long-" + strings.Repeat("x", 10<<10),
}
