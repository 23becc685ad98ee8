package change

import "testing"

func TestKeyHash(t *testing.T) {
	num := func(name, text string) Column { return Column{Name: name, Value: Value{Kind: KindNumber, Text: text}} }
	str := func(name, text string) Column { return Column{Name: name, Value: Value{Kind: KindString, Text: text}} }
	h := func(img []Column, key ...string) uint64 {
		t.Helper()
		v, ok := KeyHash(img, key)
		if !ok {
			t.Fatalf("no hash for %v by %v", img, key)
		}
		return v
	}
	if h([]Column{num("id", "43.950")}, "id") != h([]Column{num("id", "43.95"), str("x", "other")}, "id") {
		t.Error("one NUMERIC value with and without trailing zeros hashes apart")
	}
	if h([]Column{num("id", "7.0")}, "id") != h([]Column{num("id", "7")}, "id") {
		t.Error("7.0 and 7 hash apart")
	}
	if h([]Column{num("id", "70")}, "id") == h([]Column{num("id", "7")}, "id") {
		t.Error("70 and 7 hash alike")
	}
	if h([]Column{str("a", "ab"), str("b", "c")}, "a", "b") == h([]Column{str("a", "a"), str("b", "bc")}, "a", "b") {
		t.Error("the key columns run into each other")
	}
	if h([]Column{str("a", "1"), str("b", "2")}, "a", "b") == h([]Column{str("a", "1"), str("b", "2")}, "b", "a") {
		t.Error("the key order does not count")
	}
	if _, ok := KeyHash([]Column{num("id", "1")}, []string{"id", "tenant"}); ok {
		t.Error("a missing key column hashes")
	}
}
