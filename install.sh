#!/usr/bin/env bash
# Installs jobwarden as a systemd service, or removes it again.
#
# It installs the binary, the unit, the git worktree scripts, the example
# configs, shell completions (bash, zsh, fish) and manual pages under a
# prefix, creates the service user and group (system installs), the root
# (inbox/, runs/, archive/) and a default config naming that root, and never
# overwrites an existing config. Every step looks before it acts, so a
# second run changes nothing and says "unchanged". --dry-run prints every
# action and changes nothing. It downloads nothing itself; only the cargo
# build (skipped with --binary) may fetch crates.
#
# Usage: ./install.sh --help. Layout and upgrades: README.md, "Install".
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SRC
# The service user's comment (GECOS) says what install.sh created, so that
# --uninstall --purge removes only that.
readonly MADE_USER="jobwarden service (user made by install.sh)"
readonly MADE_USER_AND_GROUP="jobwarden service (user and group made by install.sh)"

mode=system       # system | user
action=install    # install | uninstall
purge=0
dry_run=0
prefix="" binary="" root="" config_dir="" unit_dir="" data_home=""
service_user=jobwarden
default_unit_dir=""
work=""           # scratch folder for rendered files, removed on exit
declare -A dirs_made=() # folders made (or, with --dry-run, that would be)
declare -A gone=()      # paths removed (or, with --dry-run, that would be)

usage() {
    cat <<'EOF'
Usage: install.sh [OPTIONS]

Installs jobwarden as a systemd service: system-wide (as root, the default)
or for the current user (--user).

  --user              per-user install: ~/.local/bin, a user unit, no accounts
  --prefix DIR        where bin/, lib/ and share/ go
                      (default /usr/local; with --user ~/.local)
  --binary PATH       install this binary (and jobwarden-init beside it)
                      instead of building them with cargo build --release --locked
  --uninstall         remove the binary, unit, scripts and examples;
                      keep the root and the config
  --purge             with --uninstall: also remove the root, the config and
                      (system) the user and group install.sh created
  --dry-run           print every action, change nothing

For tests and packagers:
  --root DIR          state directory (default /var/lib/jobwarden;
                      with --user ~/.local/share/jobwarden)
  --config-dir DIR    where config.toml goes (default /etc/jobwarden;
                      with --user ~/.config/jobwarden)
  --unit-dir DIR      where the unit goes (default /etc/systemd/system;
                      with --user ~/.config/systemd/user)
  --system-user NAME  the service's user and group (default jobwarden)

  -h, --help          print this help

Exit status: 0 done, 1 refused or failed, 2 usage error.
EOF
}

# --- output -------------------------------------------------------------------

note() { printf '%s\n' "$*"; }

die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 1
}

usage_error() {
    printf 'install.sh: %s\n\n' "$*" >&2
    usage >&2
    exit 2
}

# change WHAT COMMAND...: says WHAT and runs COMMAND; with --dry-run only
# says "would WHAT".
change() {
    local what=$1
    shift
    if ((dry_run)); then
        note "would $what"
    else
        note "$what"
        "$@"
    fi
}

# --- options ------------------------------------------------------------------

parse_args() {
    while (($#)); do
        local opt=$1 value=""
        if [[ $opt == --*=* ]]; then
            value=${opt#*=}
            opt=${opt%%=*}
            set -- "$opt" "$value" "${@:2}"
        fi
        case $opt in
            --user) mode=user ;;
            --uninstall) action=uninstall ;;
            --purge) purge=1 ;;
            --dry-run) dry_run=1 ;;
            --prefix | --binary | --root | --config-dir | --unit-dir | --system-user)
                (($# >= 2)) || usage_error "$opt needs a value"
                set_value "$opt" "$2"
                shift
                ;;
            -h | --help)
                usage
                exit 0
                ;;
            *) usage_error "unknown option: $opt" ;;
        esac
        shift
    done
    check_combination
}

set_value() {
    case $1 in
        --prefix) prefix=$2 ;;
        --binary) binary=$2 ;;
        --root) root=$2 ;;
        --config-dir) config_dir=$2 ;;
        --unit-dir) unit_dir=$2 ;;
        --system-user) service_user=$2 ;;
    esac
}

check_combination() {
    if ((purge)) && [[ $action != uninstall ]]; then
        usage_error "--purge goes with --uninstall"
    fi
    if [[ $mode == user && $service_user != jobwarden ]]; then
        usage_error "--system-user is for system installs (a --user install runs as you)"
    fi
    if [[ ! $service_user =~ ^[a-z_][a-z0-9_-]{0,31}$ ]]; then
        usage_error "--system-user: not a valid user name: $service_user"
    fi
}

# --- where things go ----------------------------------------------------------

# Fills in the defaults of the mode, makes every path absolute and derives
# the installed files' paths.
resolve_paths() {
    if [[ $mode == user ]]; then
        [[ -n ${HOME:-} ]] || die "HOME is not set; a --user install needs it"
        local config_home=${XDG_CONFIG_HOME:-$HOME/.config}
        data_home=${XDG_DATA_HOME:-$HOME/.local/share}
        prefix=${prefix:-$HOME/.local}
        root=${root:-$data_home/jobwarden}
        config_dir=${config_dir:-$config_home/jobwarden}
        default_unit_dir=$config_home/systemd/user
    else
        prefix=${prefix:-/usr/local}
        data_home=$prefix/share
        root=${root:-/var/lib/jobwarden}
        config_dir=${config_dir:-/etc/jobwarden}
        default_unit_dir=/etc/systemd/system
    fi
    unit_dir=${unit_dir:-$default_unit_dir}
    prefix=$(absolute "$prefix")
    root=$(absolute "$root")
    config_dir=$(absolute "$config_dir")
    unit_dir=$(absolute "$unit_dir")
    default_unit_dir=$(absolute "$default_unit_dir")
    data_home=$(absolute "$data_home")
    derive_paths
}

derive_paths() {
    bin_path=$prefix/bin/jobwarden
    init_path=$prefix/bin/jobwarden-init
    lib_dir=$prefix/lib/jobwarden
    # Not share/jobwarden: with --user that is the root (~/.local/share/jobwarden).
    examples_dir=$prefix/share/doc/jobwarden/examples
    config_file=$config_dir/config.toml
    unit_file=$unit_dir/jobwarden.service
    web_unit_file=$unit_dir/jobwarden-web.service
    # Where bash-completion, zsh (Debian's fpath) and fish look: under the
    # prefix for a system install, the XDG data folder for --user. Manual
    # pages go beside bin/, where man finds them from PATH.
    bash_completion=$data_home/bash-completion/completions/jobwarden
    zsh_completion=$data_home/zsh/site-functions/_jobwarden
    fish_completion=$data_home/fish/vendor_completions.d/jobwarden.fish
    man_dir=$prefix/share/man/man1
    unit_template=$SRC/systemd/jobwarden.service
    web_unit_template=$SRC/systemd/jobwarden-web.service
    if [[ $mode == user ]]; then
        unit_template=$SRC/systemd/jobwarden-user.service
        web_unit_template=$SRC/systemd/jobwarden-web-user.service
    fi
    return 0
}

# absolute PATH: PATH made absolute against the current folder, without a
# trailing slash ("/" becomes "", so that "$prefix/bin" stays clean).
absolute() {
    local path=$1
    [[ $path == /* ]] || path=$PWD/$path
    while [[ $path == */ ]]; do path=${path%/}; done
    printf '%s' "$path"
}

# The paths written into the unit must hold no character that systemd would
# read as a specifier, a quote or a separator.
check_unit_paths() {
    local path
    [[ -n $root ]] || die "--root / would make the whole system the state directory"
    for path in "$bin_path" "$root" "$config_file"; do
        [[ $path =~ ^[[:alnum:]/._+@-]+$ ]] ||
            die "path not usable in a systemd unit (use letters, digits and / . _ + @ -): $path"
    done
}

check_sources() {
    local f
    for f in "$unit_template" "$web_unit_template" "$SRC/config/config.toml" "$SRC/scripts/worktree-prepare"; do
        [[ -f $f ]] || die "missing $f: run install.sh from a jobwarden source tree"
    done
}

check_privileges() {
    [[ $mode == system ]] || return 0
    ((EUID == 0)) && return 0
    if ((dry_run)); then
        note "note: not root; a real system $action needs root (sudo)"
        return 0
    fi
    die "a system $action needs root: run it with sudo, or use --user for a per-user install"
}

# --- small actions, each idempotent -------------------------------------------

ensure_dir() {
    [[ -d $1 || -n ${dirs_made[$1]:-} ]] && return 0
    dirs_made[$1]=1
    change "mkdir: $1" mkdir -p "$1"
}

# ensure_mode MODE PATH (octal, e.g. 2770)
ensure_mode() {
    local mode=$1 path=$2 current
    if [[ ! -e $path ]]; then # only with --dry-run: it would have been made
        note "would chmod $mode: $path"
        return 0
    fi
    current=$(stat -c %a "$path")
    ((8#$current == 8#$mode)) && return 0
    # Five digits, so that chmod also clears a directory's setgid bit.
    change "chmod $mode: $path" chmod "$(printf '%05o' "$((8#$mode))")" "$path"
}

# ensure_owner USER:GROUP PATH ("" leaves the owner alone)
ensure_owner() {
    local owner=$1 path=$2
    [[ -n $owner ]] || return 0
    if [[ -e $path ]] && [[ $(stat -c %U:%G "$path") == "$owner" ]]; then
        return 0
    fi
    change "chown $owner: $path" chown "$owner" "$path"
}

# put_file MODE OWNER SRC DEST: replaces DEST atomically (a temporary file
# beside it, renamed over it), so that a running binary or a reader never
# sees a half-written file.
put_file() {
    local mode=$1 owner=$2 src=$3 dest=$4 tmp
    tmp=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
    cp "$src" "$tmp"
    chmod "$mode" "$tmp"
    [[ -z $owner ]] || chown "$owner" "$tmp"
    mv -f "$tmp" "$dest"
}

# install_file MODE SRC DEST [OWNER]: copies SRC unless DEST already holds
# the same bytes (then its mtime stays put), and fixes mode and owner.
install_file() {
    local mode=$1 src=$2 dest=$3 owner=${4:-}
    if [[ -f $dest ]] && cmp -s "$src" "$dest"; then
        note "unchanged: $dest"
        ensure_mode "$mode" "$dest"
        ensure_owner "$owner" "$dest"
        return 0
    fi
    ensure_dir "$(dirname "$dest")"
    change "install: $dest" put_file "$mode" "$owner" "$src" "$dest"
}

remove_file() {
    if [[ -e $1 || -L $1 ]]; then
        change "remove: $1" rm -f "$1"
        gone[$1]=1
    else
        note "absent: $1"
    fi
}

remove_dir_if_empty() {
    [[ -d $1 ]] || return 0
    local entry
    while IFS= read -r -d '' entry; do
        [[ -n ${gone[$entry]:-} ]] && continue
        note "kept: $1 (not empty)"
        return 0
    done < <(find "$1" -mindepth 1 -maxdepth 1 -print0)
    change "rmdir: $1" rmdir "$1"
    gone[$1]=1
}

# --- install ------------------------------------------------------------------

obtain_binary() {
    if [[ -n $binary ]]; then
        binary=$(absolute "$binary")
        [[ -f $binary && -x $binary ]] || die "--binary $binary is not an executable file"
        return 0
    fi
    command -v cargo >/dev/null ||
        die "cargo not found; build as yourself (cargo build --release --locked) and pass --binary target/release/jobwarden"
    binary=$SRC/target/release/jobwarden
    change "run: cargo build --release --locked" build_release
}

build_release() {
    (cd "$SRC" && cargo build --release --locked)
}

ensure_accounts() {
    local made_group=0
    if getent group "$service_user" >/dev/null; then
        note "unchanged: group $service_user"
    else
        change "groupadd: $service_user" groupadd --system "$service_user"
        made_group=1
    fi
    if getent passwd "$service_user" >/dev/null; then
        note "unchanged: user $service_user"
        return 0
    fi
    local comment=$MADE_USER
    ((made_group)) && comment=$MADE_USER_AND_GROUP
    change "useradd: $service_user (home $root)" useradd --system --gid "$service_user" \
        --home-dir "$root" --no-create-home --shell "$(nologin_shell)" \
        --comment "$comment" "$service_user"
}

nologin_shell() {
    local shell
    for shell in /usr/sbin/nologin /sbin/nologin; do
        [[ -x $shell ]] && { printf '%s' "$shell"; return 0; }
    done
    printf '/bin/false'
}

install_scripts() {
    local script
    for script in "$SRC"/scripts/worktree-*; do
        install_file 0755 "$script" "$lib_dir/$(basename "$script")"
    done
}

# The examples name the worktree scripts by their default place; they are
# rewritten to where this install puts them.
install_examples() {
    local example rendered examples
    mapfile -t examples < <(example_sources)
    for example in "${examples[@]}"; do
        rendered=$work/example-$(basename "$example")
        sed "s|/usr/local/lib/jobwarden/|$lib_dir/|g" "$example" >"$rendered"
        install_file 0644 "$rendered" "$examples_dir/$(basename "$example")"
    done
}

example_sources() {
    local f
    for f in "$SRC"/config/examples/* "$SRC/config/config.toml"; do
        [[ -f $f ]] && printf '%s\n' "$f"
    done
    return 0
}

# Completions and manual pages are generated by the binary being installed.
install_completions() {
    local shell dest
    for shell in bash zsh fish; do
        dest=$(completion_file "$shell")
        if ! can_run_binary; then
            note "would install: $dest"
            continue
        fi
        "$binary" completions "$shell" >"$work/completion.$shell" ||
            die "$binary completions $shell failed"
        install_file 0644 "$work/completion.$shell" "$dest"
    done
}

completion_file() {
    case $1 in
        bash) printf '%s' "$bash_completion" ;;
        zsh) printf '%s' "$zsh_completion" ;;
        fish) printf '%s' "$fish_completion" ;;
    esac
}

# jobwarden.1 and a page per command; a page of a command this version no
# longer has is removed.
install_man_pages() {
    if ! can_run_binary; then
        note "would install: $man_dir/jobwarden.1 (and a page per command)"
        return 0
    fi
    local pages=$work/man page
    mkdir -p "$pages"
    "$binary" man --out-dir "$pages" >/dev/null || die "$binary man --out-dir failed"
    for page in "$pages"/*.1; do
        install_file 0644 "$page" "$man_dir/$(basename "$page")"
    done
    for page in $(installed_man_pages); do
        [[ -f $pages/$(basename "$page") ]] || remove_file "$page"
    done
}

# The pages of ours in man_dir, one a line.
installed_man_pages() {
    local page
    for page in "$man_dir"/jobwarden.1 "$man_dir"/jobwarden-*.1; do
        [[ -e $page ]] && printf '%s\n' "$page"
    done
    return 0
}

# With --dry-run the binary may not be built yet.
can_run_binary() {
    [[ -x $binary ]]
}

install_unit() {
    local rendered=$work/jobwarden.service
    render_unit >"$rendered"
    grep -qxF "ExecStart=$bin_path daemon" "$rendered" ||
        die "could not render $unit_template (no ExecStart line to rewrite)"
    grep -qxF "ExecReload=$bin_path reload" "$rendered" ||
        die "could not render $unit_template (no ExecReload line to rewrite)"
    install_file 0644 "$rendered" "$unit_file"
    local web=$work/jobwarden-web.service
    render_unit "$web_unit_template" >"$web"
    grep -qxF "ExecStart=$bin_path web" "$web" ||
        die "could not render $web_unit_template (no ExecStart line to rewrite)"
    install_file 0644 "$web" "$web_unit_file"
}

# A unit (the daemon's, or the TEMPLATE given) with this install's paths
# and user in place of the defaults.
render_unit() {
    local template=${1:-$unit_template}
    local state_dir="" sed_args=(
        -e "s|^ExecStart=.*/jobwarden daemon\$|ExecStart=$bin_path daemon|"
        -e "s|^ExecStart=.*/jobwarden web\$|ExecStart=$bin_path web|"
        -e "s|^ExecReload=.*/jobwarden reload\$|ExecReload=$bin_path reload|"
        -e "s|^Environment=JOBWARDEN_HOME=.*|Environment=JOBWARDEN_HOME=$root|"
        -e "s|^Environment=JOBWARDEN_CONFIG=.*|Environment=JOBWARDEN_CONFIG=$config_file|"
    )
    if [[ $mode == system ]]; then
        sed_args+=(
            -e "s|^User=.*|User=$service_user|"
            -e "s|^Group=.*|Group=$service_user|"
            -e "s|^ReadWritePaths=/var/lib/jobwarden |ReadWritePaths=$root |"
            -e "s|^ReadWritePaths=/var/lib/jobwarden\$|ReadWritePaths=$root|"
        )
        # StateDirectory= names a folder under /var/lib only.
        [[ $root == /var/lib/?* ]] && state_dir=${root#/var/lib/}
        if [[ -n $state_dir ]]; then
            sed_args+=(-e "s|^StateDirectory=.*|StateDirectory=$state_dir|")
        else
            sed_args+=(
                -e "s|^StateDirectory=.*|# No StateDirectory=: the root is outside /var/lib; install.sh made it.|"
                -e "/^StateDirectoryMode=/d"
            )
        fi
    fi
    sed "${sed_args[@]}" "$template"
}

# The root: 2770 and the service's user and group on a system install (the
# group lets operators drop prompts and ABORT markers); 0700 for --user.
ensure_root() {
    local dir owner="" dir_mode=0700
    if [[ $mode == system ]]; then
        owner=$service_user:$service_user
        dir_mode=2770
    fi
    for dir in "$root" "$root/inbox" "$root/runs" "$root/archive"; do
        if dir_is "$dir_mode" "$owner" "$dir"; then
            note "unchanged: $dir"
            continue
        fi
        ensure_dir "$dir"
        ensure_mode "$dir_mode" "$dir"
        ensure_owner "$owner" "$dir"
    done
}

# dir_is MODE OWNER DIR: DIR exists with that mode and owner ("" any owner).
dir_is() {
    [[ -d $3 ]] || return 1
    ((8#$(stat -c %a "$3") == 8#$1)) || return 1
    [[ -z $2 || $(stat -c %U:%G "$3") == "$2" ]]
}

# The config names the root, so that the CLI, the unit and a daemon started
# by hand all find the same one (the CLI's default root differs: root's is
# /var/lib/jobwarden, even for a --user install done as root).
install_config() {
    if [[ -e $config_file ]]; then
        note "kept: $config_file (exists; install.sh never overwrites a config)"
        grep -qxF "root = \"$root\"" "$config_file" ||
            note "note: $config_file does not say root = \"$root\"; outside the unit, the CLI finds this root with JOBWARDEN_HOME=$root"
        return 0
    fi
    ensure_dir "$config_dir"
    local rendered=$work/config.toml
    sed "s|^# root = \"/var/lib/jobwarden\"\$|root = \"$root\"|" "$SRC/config/config.toml" >"$rendered"
    grep -qxF "root = \"$root\"" "$rendered" ||
        die "could not render $SRC/config/config.toml (no '# root = ...' line to set)"
    # Readable by the service, not by everyone: a config can hold tokens.
    if [[ $mode == system ]]; then
        change "install: $config_file" put_file 0640 "root:$service_user" "$rendered" "$config_file"
    else
        change "install: $config_file" put_file 0600 "" "$rendered" "$config_file"
    fi
}

install_all() {
    obtain_binary
    [[ $mode == system ]] && ensure_accounts
    install_file 0755 "$binary" "$bin_path"
    install_init
    install_scripts
    install_examples
    install_completions
    install_man_pages
    install_unit
    ensure_root
    install_config
    reload_systemd
    next_steps
}

# --- systemd ------------------------------------------------------------------

systemd_running() {
    [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null
}

systemctl_cmd() {
    if [[ $mode == user ]]; then printf 'systemctl --user'; else printf 'systemctl'; fi
}

# daemon-reload when systemd runs and reads the folder the unit went to;
# otherwise say what to run.
reload_systemd() {
    local sc
    sc=$(systemctl_cmd)
    if [[ $unit_dir != "$default_unit_dir" ]]; then
        note "note: $unit_dir is not where systemd looks ($default_unit_dir); no daemon-reload"
    elif ! systemd_running; then
        note "note: systemd is not running here; where it runs: $sc daemon-reload"
    else
        # shellcheck disable=SC2086 # $sc is two words on purpose
        change "run: $sc daemon-reload" $sc daemon-reload ||
            note "note: $sc daemon-reload failed; run it yourself"
    fi
}

next_steps() {
    local sc
    sc=$(systemctl_cmd)
    note ""
    note "Next:"
    note "  edit $config_file (the agent to run), then: $bin_path --config $config_file config check"
    note "  start it now and at every boot: $sc enable --now jobwarden"
    note "  the web page too: $sc enable --now jobwarden-web (its address: jobwarden web --print-url, as the service's user)"
    if [[ $mode == user ]]; then
        note "  keep it running while you are logged out: loginctl enable-linger $(id -un)"
        note "  zsh completion: add $(dirname "$zsh_completion") to fpath (bash and fish find theirs)"
    else
        note "  let an operator drop prompts and abort jobs: usermod -aG $service_user <name> (from their next login)"
        note "  the CLI then finds the root with: export JOBWARDEN_HOME=$root"
    fi
}

# The sandbox's init (jobwarden-init), built beside the binary: a job's
# start loads it instead of all of jobwarden. Without one beside the
# binary, a stale one from an earlier install is removed (jobwarden then
# runs itself as the init).
install_init() {
    local init_src
    init_src=$(dirname "$binary")/jobwarden-init
    if [[ -f $init_src && -x $init_src ]]; then
        install_file 0755 "$init_src" "$init_path"
    else
        note "no jobwarden-init beside $binary: sandboxed jobs run jobwarden itself as their init"
        remove_file "$init_path"
    fi
}

# --- uninstall ----------------------------------------------------------------

uninstall_all() {
    warn_if_service_enabled
    remove_file "$bin_path"
    remove_file "$init_path"
    remove_file "$unit_file"
    remove_file "$web_unit_file"
    remove_scripts
    remove_examples
    remove_completions_and_man_pages
    if ((purge)); then
        purge_state
    else
        note "kept: $root (the jobs' state; --purge removes it)"
        note "kept: $config_file (--purge removes it)"
    fi
    reload_systemd
}

warn_if_service_enabled() {
    systemd_running && [[ $unit_dir == "$default_unit_dir" ]] || return 0
    local sc
    sc=$(systemctl_cmd)
    # shellcheck disable=SC2086
    if $sc --quiet is-enabled jobwarden 2>/dev/null || $sc --quiet is-active jobwarden 2>/dev/null; then
        note "note: the service is enabled or running; stop it with: $sc disable --now jobwarden"
        note "      (running jobs go on; end them first with: jobwarden abort --all --wait)"
    fi
}

remove_scripts() {
    local script
    for script in "$SRC"/scripts/worktree-*; do
        remove_file "$lib_dir/$(basename "$script")"
    done
    remove_dir_if_empty "$lib_dir"
}

remove_completions_and_man_pages() {
    local shell page
    for shell in bash zsh fish; do
        remove_file "$(completion_file "$shell")"
    done
    for page in $(installed_man_pages); do
        remove_file "$page"
    done
}

remove_examples() {
    local example examples
    mapfile -t examples < <(example_sources)
    for example in "${examples[@]}"; do
        remove_file "$examples_dir/$(basename "$example")"
    done
    remove_dir_if_empty "$examples_dir"
    remove_dir_if_empty "$(dirname "$examples_dir")"
}

purge_state() {
    remove_root
    remove_file "$config_file"
    remove_dir_if_empty "$config_dir"
    [[ $mode == system ]] && remove_accounts
    return 0
}

# Refuses a folder that does not look like a jobwarden root, so that a
# mistyped --root never costs anyone their files.
remove_root() {
    if [[ ! -e $root ]]; then
        note "absent: $root"
        return 0
    fi
    if [[ -n $(ls -A "$root") && ! -d $root/inbox && ! -d $root/runs ]]; then
        die "$root has neither inbox/ nor runs/: not a jobwarden root, not removing it"
    fi
    change "remove: $root (with every job's state)" rm -rf -- "$root"
}

remove_accounts() {
    local comment=""
    if getent passwd "$service_user" >/dev/null; then
        comment=$(getent passwd "$service_user" | cut -d: -f5)
        case $comment in
            "$MADE_USER" | "$MADE_USER_AND_GROUP") change "userdel: $service_user" delete_user ;;
            *) note "kept: user $service_user (install.sh did not create it)" ;;
        esac
    else
        note "absent: user $service_user"
    fi
    if [[ $comment == "$MADE_USER_AND_GROUP" ]]; then
        remove_group
    elif ! getent group "$service_user" >/dev/null; then
        note "absent: group $service_user"
    else
        note "kept: group $service_user (install.sh did not create it)"
    fi
}

# userdel may have taken the group along (USERGROUPS_ENAB in login.defs).
remove_group() {
    if getent group "$service_user" >/dev/null; then
        change "groupdel: $service_user" groupdel "$service_user"
    else
        note "removed: group $service_user (with its user)"
    fi
}

delete_user() {
    userdel "$service_user" ||
        die "userdel $service_user failed; stop the service and its jobs first (jobwarden abort --all --wait; systemctl stop jobwarden)"
}

# --- main ---------------------------------------------------------------------

main() {
    parse_args "$@"
    # useradd and friends live in sbin, which a sudo or CI PATH may lack.
    PATH=$PATH:/usr/sbin:/sbin
    # Installed files are readable by everyone unless a step says otherwise
    # (sudo may bring root's stricter umask along).
    umask 022
    resolve_paths
    # Who may do this first: a refusal should not depend on the sources.
    check_privileges
    check_unit_paths
    check_sources
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    ((dry_run)) && note "dry run: nothing is changed"
    if [[ $action == install ]]; then
        install_all
    else
        uninstall_all
    fi
}

main "$@"
