package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
)

//go:embed report.html.tmpl
var pageTemplate string

var tmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"lower": strings.ToLower,
	"add":   func(a, b int) int { return a + b },
}).Parse(pageTemplate))

// Write lays p out as HTML.
func Write(w io.Writer, p Page) error {
	if err := tmpl.Execute(w, p); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
