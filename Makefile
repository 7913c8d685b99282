# bgpolicy: thin wrappers around scripts/, where the work is done (see README.md).
#
#   make run        install missing packages, build, run the agent (ARGS="..." go to bgpolicyd)
#   make check      install missing packages, build, run every test (STAGES="unit fuzz" for some)
#   make bench      benchmark the D-Bus layer on a private bus
#   make release    install missing build packages, then the release build `make install` installs
#   make install    prefix=/usr/local DESTDIR= (GNU conventions, PREFIX= too; see below); builds
#                   what `make release` builds first, as the owner of the tree when run as root
#   make uninstall  remove what `make install` installed, same variables
#   make dbus-xml   regenerate dbus/*.xml from the agent's interface descriptions
#   make clean      remove the build folders

# Installation directories (GNU conventions). Every one can be set by its GNU name in lower
# case (make install prefix=/usr) or in upper case (PREFIX=/usr). A value on the command line
# wins over one from the environment (so an exported PREFIX does not override
# `make install prefix=...`); of two given the same way, the upper-case one wins.
#   $(call pick,UPPER,lower,default)
pick = $(strip \
	$(if $(filter command line,$(origin $1)),$($1), \
	$(if $(filter command line,$(origin $2)),$($2), \
	$(if $(filter environment%,$(origin $1)),$($1), \
	$(if $(filter environment%,$(origin $2)),$($2),$3)))))
override PREFIX             := $(call pick,PREFIX,prefix,/usr/local)
override EXEC_PREFIX        := $(call pick,EXEC_PREFIX,exec_prefix,$(PREFIX))
override BINDIR             := $(call pick,BINDIR,bindir,$(EXEC_PREFIX)/bin)
override LIBEXECDIR         := $(call pick,LIBEXECDIR,libexecdir,$(EXEC_PREFIX)/libexec)
override DATAROOTDIR        := $(call pick,DATAROOTDIR,datarootdir,$(PREFIX)/share)
override DOCDIR             := $(call pick,DOCDIR,docdir,$(DATAROOTDIR)/doc/bgpolicy)
override MANDIR             := $(call pick,MANDIR,mandir,$(DATAROOTDIR)/man)
SYSTEMDUSERUNITDIR ?= $(PREFIX)/lib/systemd/user
DBUSSERVICEDIR     ?= $(DATAROOTDIR)/dbus-1/services
DBUSINTERFACEDIR   ?= $(DATAROOTDIR)/dbus-1/interfaces
BASHCOMPLETIONDIR  ?= $(DATAROOTDIR)/bash-completion/completions
ZSHCOMPLETIONDIR   ?= $(DATAROOTDIR)/zsh/site-functions
FISHCOMPLETIONDIR  ?= $(DATAROOTDIR)/fish/vendor_completions.d
DESTDIR            ?=

INSTALL_ENV = DESTDIR='$(DESTDIR)' PREFIX='$(PREFIX)' BINDIR='$(BINDIR)' \
	LIBEXECDIR='$(LIBEXECDIR)' DOCDIR='$(DOCDIR)' SYSTEMDUSERUNITDIR='$(SYSTEMDUSERUNITDIR)' \
	DBUSSERVICEDIR='$(DBUSSERVICEDIR)' DBUSINTERFACEDIR='$(DBUSINTERFACEDIR)' MANDIR='$(MANDIR)' \
	BASHCOMPLETIONDIR='$(BASHCOMPLETIONDIR)' ZSHCOMPLETIONDIR='$(ZSHCOMPLETIONDIR)' \
	FISHCOMPLETIONDIR='$(FISHCOMPLETIONDIR)'

.PHONY: all build deps build-deps release run check bench install uninstall clean dbus-xml
# Prerequisites run in the order written: packages before the build.
.NOTPARALLEL:

all: build

build:
	scripts/build.sh

deps:
	scripts/deps.sh

# Only what building and running the agent need, not the test tools (scripts/deps.sh).
build-deps:
	scripts/deps.sh build

run: build-deps build
	scripts/run.sh $(ARGS)

check: deps
	scripts/check.sh $(STAGES)

bench: deps
	scripts/bench.sh $(ARGS)

# As yourself, before `sudo make install`, so that root builds nothing (and needs no toolchain
# on its PATH: sudo resets it).
release: build-deps
	scripts/install.sh build

install: build-deps
	$(INSTALL_ENV) scripts/install.sh install

uninstall:
	$(INSTALL_ENV) scripts/install.sh uninstall

# Regenerates dbus/org.bgpolicy.*.xml from the agent's interface descriptions.
dbus-xml: build
	scripts/dbus-xml.sh

clean:
	rm -rf .build .build-release
