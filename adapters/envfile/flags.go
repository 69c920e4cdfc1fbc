package envfile

import (
	"flag"
	"fmt"
)

// SourceFromFlags layers configuration as both binaries read it: the flags
// that were set on fs (named in flagEnv by the variable they override), then
// environ, then the env file at path (a missing file is empty).
func SourceFromFlags(fs *flag.FlagSet, flagEnv map[string]string, environ []string, path string) (*Source, error) {
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if env, ok := flagEnv[f.Name]; ok {
			set[env] = f.Value.String()
		}
	})
	file, err := Load(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return NewSource(set, environ, file), nil
}
