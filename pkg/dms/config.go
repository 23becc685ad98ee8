package dms

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Config configures a Decoder. In the service's config file it is the `dms:` section; the keys
// are snake_case (yaml tags below). UnmarshalYAML also accepts the lower-case spellings the
// section had before it had tags (beforeimagefield, biprefix, bisuffix, bienabled).
type Config struct {
	// BeforeImageField is the top-level key of the before-image object, i.e. the FieldName of
	// the task's BeforeImageSettings. Default "before-image". Must not be empty or one of the
	// envelope keys "data", "metadata", "control".
	BeforeImageField string `yaml:"before_image_field"`
	// BIPrefix and BISuffix name the columns the add-before-image-columns transformation injects
	// into data: <BIPrefix><column><BISuffix>. Defaults "BI_" and "". They are only recognised
	// when BIEnabled is true.
	BIPrefix string `yaml:"bi_prefix"`
	BISuffix string `yaml:"bi_suffix"`
	// BIEnabled turns on recognition of add-before-image-columns columns. Default false. When on,
	// every data column whose name starts with BIPrefix, ends with BISuffix and is longer than
	// both is removed from Event.Columns; on update records it becomes Event.Before (with the
	// prefix and suffix stripped) unless the record also carries a before-image object.
	BIEnabled bool `yaml:"bi_enabled"`
}

// stripBI reports whether name is a before-image column (BIPrefix<column>BISuffix) and
// returns the source column name.
func (c *Config) stripBI(name []byte) ([]byte, bool) {
	p, s := c.BIPrefix, c.BISuffix
	if len(name) <= len(p)+len(s) || string(name[:len(p)]) != p || string(name[len(name)-len(s):]) != s {
		return nil, false
	}
	return name[len(p) : len(name)-len(s)], true
}

// DefaultConfig returns the configuration for a task with BeforeImageSettings.FieldName
// "before-image" and no add-before-image-columns transformation.
func DefaultConfig() Config {
	return Config{BeforeImageField: "before-image", BIPrefix: "BI_"}
}

// Validate reports the first invalid setting, named by its path in the config file
// ("dms.before_image_field: must not be empty"). Callers should not add another "dms:" prefix.
func (c Config) Validate() error {
	switch c.BeforeImageField {
	case "":
		return errors.New("dms.before_image_field: must not be empty")
	case "data", "metadata", "control":
		return fmt.Errorf("dms.before_image_field: %q collides with an envelope key (data, metadata, control)", c.BeforeImageField)
	}
	if c.BIEnabled && c.BIPrefix == "" && c.BISuffix == "" {
		return errors.New("dms.bi_prefix, dms.bi_suffix: must not both be empty when dms.bi_enabled is true")
	}
	return nil
}

// configKeys maps every accepted key (snake_case and the legacy lower-case spelling) to the
// canonical snake_case key.
var configKeys = map[string]string{
	"before_image_field": "before_image_field", "beforeimagefield": "before_image_field",
	"bi_prefix": "bi_prefix", "biprefix": "bi_prefix",
	"bi_suffix": "bi_suffix", "bisuffix": "bi_suffix",
	"bi_enabled": "bi_enabled", "bienabled": "bi_enabled",
}

// UnmarshalYAML decodes the `dms:` section onto c, keeping the values of keys that are absent
// (so decode onto DefaultConfig()). Unknown keys, and a key given in both spellings, are
// errors naming the dms path: a custom unmarshaler is not covered by the outer decoder's
// KnownFields check, so it checks keys itself.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("dms: want a mapping (line %d)", n.Line)
	}
	seen := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := configKeys[k.Value]
		if !ok {
			return fmt.Errorf("dms.%s: unknown key (line %d; known: before_image_field, bi_prefix, bi_suffix, bi_enabled)", k.Value, k.Line)
		}
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("dms.%s: dms.%s given twice (line %d, first as %s)", k.Value, key, k.Line, prev)
		}
		seen[key] = k.Value
		var err error
		switch key {
		case "before_image_field":
			err = v.Decode(&c.BeforeImageField)
		case "bi_prefix":
			err = v.Decode(&c.BIPrefix)
		case "bi_suffix":
			err = v.Decode(&c.BISuffix)
		case "bi_enabled":
			err = v.Decode(&c.BIEnabled)
		}
		if err != nil {
			return fmt.Errorf("dms.%s: line %d: want a %s: %w", key, v.Line, configKind(key), err)
		}
	}
	return nil
}

func configKind(key string) string {
	if key == "bi_enabled" {
		return "boolean"
	}
	return "string"
}
