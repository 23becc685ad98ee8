// Package iampolicy evaluates the Allow statements of an IAM policy document, enough to prove
// that the policy shipped in docs/deploy grants every AWS call the service makes (the
// integration test TestIAMPolicyCoversEveryCall records them). It knows Action and Resource
// with "*" and "?" wildcards, placeholders substituted before evaluation, and the StringLike and
// StringEquals conditions; anything not allowed is denied (there are no Deny statements in the
// shipped policy, and an unknown condition operator denies).
//
// Concurrency: a Policy is read-only after Parse and safe for concurrent use.
package iampolicy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Policy is a parsed policy document.
type Policy struct {
	Statements []Statement
}

// Statement is one statement of a policy.
type Statement struct {
	Sid       string
	Effect    string
	Actions   []string
	Resources []string
	// Conditions maps an operator (StringLike, StringEquals) to condition keys and their values.
	Conditions map[string]map[string][]string
}

// stringList accepts a JSON string or array of strings.
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

// Parse reads a policy document, replacing each placeholder (a key of subst, such as "REGION")
// in actions, resources and condition values by its value.
func Parse(doc []byte, subst map[string]string) (*Policy, error) {
	var raw struct {
		Statement []struct {
			Sid       string
			Effect    string
			Action    stringList
			Resource  stringList
			Condition map[string]map[string]stringList
		}
	}
	if err := json.Unmarshal([]byte(replace(string(doc), subst)), &raw); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p := &Policy{}
	for _, s := range raw.Statement {
		st := Statement{Sid: s.Sid, Effect: s.Effect, Actions: s.Action, Resources: s.Resource}
		if len(s.Condition) > 0 {
			st.Conditions = map[string]map[string][]string{}
			for op, kv := range s.Condition {
				st.Conditions[op] = map[string][]string{}
				for k, v := range kv {
					st.Conditions[op][k] = v
				}
			}
		}
		p.Statements = append(p.Statements, st)
	}
	return p, nil
}

// replace substitutes whole placeholder words only (REGION, not a REGION inside another word).
func replace(s string, subst map[string]string) string {
	if len(subst) == 0 {
		return s
	}
	var b strings.Builder
	word := func(r byte) bool { return r >= 'A' && r <= 'Z' || r == '_' }
	for i := 0; i < len(s); {
		if !word(s[i]) || (i > 0 && word(s[i-1])) {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i
		for j < len(s) && word(s[j]) {
			j++
		}
		if v, ok := subst[s[i:j]]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// Allowed reports whether the policy allows action ("service:Operation") on resource (an ARN)
// with the request's condition keys (such as "s3:prefix"; nil for none), and names the
// statement that allows it.
func (p *Policy) Allowed(action, resource string, keys map[string]string) (bool, string) {
	for _, s := range p.Statements {
		if s.Effect != "Allow" || !matchAny(s.Actions, action, true) || !matchAny(s.Resources, resource, false) {
			continue
		}
		if conditionsHold(s.Conditions, keys) {
			return true, s.Sid
		}
	}
	return false, ""
}

func matchAny(patterns []string, v string, fold bool) bool {
	for _, p := range patterns {
		if fold { // action names are case-insensitive
			p, v = strings.ToLower(p), strings.ToLower(v)
		}
		if Match(p, v) {
			return true
		}
	}
	return false
}

// Match reports whether v matches the IAM pattern p ("*" any run of characters, including "/"
// and ":", "?" one character).
func Match(p, v string) bool {
	if !strings.ContainsAny(p, "*?") {
		return p == v
	}
	return globMatch(p, v)
}

func globMatch(p, v string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(v); i >= 0; i-- {
				if globMatch(p[1:], v[i:]) {
					return true
				}
			}
			return false
		case '?':
			if v == "" {
				return false
			}
			p, v = p[1:], v[1:]
		default:
			if v == "" || p[0] != v[0] {
				return false
			}
			p, v = p[1:], v[1:]
		}
	}
	return v == ""
}

// conditionsHold evaluates StringLike and StringEquals; a key the request does not carry fails
// its condition, and so does an unknown operator.
func conditionsHold(conds map[string]map[string][]string, keys map[string]string) bool {
	for op, kv := range conds {
		for k, vals := range kv {
			got, ok := keys[k]
			if !ok {
				return false
			}
			hit := false
			for _, want := range vals {
				switch op {
				case "StringLike":
					hit = hit || globMatch(want, got)
				case "StringEquals":
					hit = hit || want == got
				default:
					return false
				}
			}
			if !hit {
				return false
			}
		}
	}
	return true
}
