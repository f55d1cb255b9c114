package serve_test

import "strconv"

func itoa(i int) string { return strconv.Itoa(i) }

func atoi(s string) int {
	v, _ := strconv.Atoi(s)
	return v
}
