package dms

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestConfigValidateNamesYAMLPath: errors name the key a user writes in the config file
// (dms.before_image_field), never a Go field name.
func TestConfigValidateNamesYAMLPath(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "dms.before_image_field: must not be empty"},
		{Config{BeforeImageField: "data"}, `dms.before_image_field: "data" collides with an envelope key (data, metadata, control)`},
		{Config{BeforeImageField: "metadata"}, `dms.before_image_field: "metadata" collides with an envelope key (data, metadata, control)`},
		{Config{BeforeImageField: "control"}, `dms.before_image_field: "control" collides with an envelope key (data, metadata, control)`},
		{Config{BeforeImageField: "x", BIEnabled: true}, "dms.bi_prefix, dms.bi_suffix: must not both be empty when dms.bi_enabled is true"},
	} {
		err := tc.cfg.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "Config.") {
			t.Errorf("%+v: error %q names a Go field", tc.cfg, err)
		}
	}
	if err := (Config{BeforeImageField: "x", BIEnabled: true, BISuffix: "_old"}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestConfigYAML: the snake_case keys load, the old lower-case spellings (the Go field names
// yaml used before the struct had tags) still load, absent keys keep the defaults, and an
// unknown key or a key given twice is an error naming the dms path.
func TestConfigYAML(t *testing.T) {
	t.Parallel()
	want := Config{BeforeImageField: "bi", BIPrefix: "OLD_", BISuffix: "_o", BIEnabled: true}
	for _, doc := range []string{
		"before_image_field: bi\nbi_prefix: OLD_\nbi_suffix: _o\nbi_enabled: true\n",
		"beforeimagefield: bi\nbiprefix: OLD_\nbisuffix: _o\nbienabled: true\n",
	} {
		got := DefaultConfig()
		if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got != want {
			t.Errorf("%q: got %+v, want %+v", doc, got, want)
		}
	}
	got := DefaultConfig()
	if err := yaml.Unmarshal([]byte("bi_enabled: true\n"), &got); err != nil {
		t.Fatal(err)
	}
	if w := (Config{BeforeImageField: "before-image", BIPrefix: "BI_", BIEnabled: true}); got != w {
		t.Errorf("defaults not kept: %+v", got)
	}
	// Nested under dms: as the service's config file has it.
	var file struct {
		DMS Config `yaml:"dms"`
	}
	file.DMS = DefaultConfig()
	if err := yaml.Unmarshal([]byte("dms:\n  before_image_field: img\n"), &file); err != nil || file.DMS.BeforeImageField != "img" || file.DMS.BIPrefix != "BI_" {
		t.Errorf("nested: %+v %v", file.DMS, err)
	}
	for doc, msg := range map[string]string{
		"before_image: x\n":           `dms.before_image: unknown key`,
		"bi_prefix: A\nbiprefix: B\n": `dms.biprefix: dms.bi_prefix given twice`,
		"bi_enabled: maybe\n":         `dms.bi_enabled:`,
		"- a\n":                       `dms: want a mapping`,
		"before_image_field: [a]\n":   `dms.before_image_field:`,
	} {
		c := DefaultConfig()
		err := yaml.Unmarshal([]byte(doc), &c)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err %v, want %q", doc, err, msg)
		}
	}
}
