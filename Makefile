# bgpolicy: thin wrappers around scripts/, where the work is done (see README.md).
#
#   make run        install missing packages, build, run the agent (ARGS="..." go to bgpolicyd)
#   make check      install missing packages, build, run every test (STAGES="unit fuzz" for some)
#   make bench      benchmark the D-Bus layer on a private bus
#   make install    prefix=/usr/local DESTDIR= (GNU conventions, PREFIX= too; see below)
#   make uninstall  remove what `make install` installed, same variables
#   make dbus-xml   regenerate dbus/*.xml from the agent's interface descriptions
#   make clean      remove the build folders

# Installation directories (GNU conventions). Every one can be set on the command line, by
# its GNU name in lower case (make install prefix=/usr) or in upper case (PREFIX=/usr); the
# upper-case one wins when both are given.
prefix             ?= /usr/local
PREFIX             ?= $(prefix)
exec_prefix        ?= $(PREFIX)
EXEC_PREFIX        ?= $(exec_prefix)
bindir             ?= $(EXEC_PREFIX)/bin
BINDIR             ?= $(bindir)
libexecdir         ?= $(EXEC_PREFIX)/libexec
LIBEXECDIR         ?= $(libexecdir)
datarootdir        ?= $(PREFIX)/share
DATAROOTDIR        ?= $(datarootdir)
docdir             ?= $(DATAROOTDIR)/doc/bgpolicy
DOCDIR             ?= $(docdir)
SYSTEMDUSERUNITDIR ?= $(PREFIX)/lib/systemd/user
DBUSSERVICEDIR     ?= $(DATAROOTDIR)/dbus-1/services
DBUSINTERFACEDIR   ?= $(DATAROOTDIR)/dbus-1/interfaces
mandir             ?= $(DATAROOTDIR)/man
MANDIR             ?= $(mandir)
BASHCOMPLETIONDIR  ?= $(DATAROOTDIR)/bash-completion/completions
ZSHCOMPLETIONDIR   ?= $(DATAROOTDIR)/zsh/site-functions
FISHCOMPLETIONDIR  ?= $(DATAROOTDIR)/fish/vendor_completions.d
DESTDIR            ?=

INSTALL_ENV = DESTDIR='$(DESTDIR)' PREFIX='$(PREFIX)' BINDIR='$(BINDIR)' \
	LIBEXECDIR='$(LIBEXECDIR)' DOCDIR='$(DOCDIR)' SYSTEMDUSERUNITDIR='$(SYSTEMDUSERUNITDIR)' \
	DBUSSERVICEDIR='$(DBUSSERVICEDIR)' DBUSINTERFACEDIR='$(DBUSINTERFACEDIR)' MANDIR='$(MANDIR)' \
	BASHCOMPLETIONDIR='$(BASHCOMPLETIONDIR)' ZSHCOMPLETIONDIR='$(ZSHCOMPLETIONDIR)' \
	FISHCOMPLETIONDIR='$(FISHCOMPLETIONDIR)'

.PHONY: all build deps run check bench install uninstall clean dbus-xml
# Prerequisites run in the order written: packages before the build.
.NOTPARALLEL:

all: build

build:
	scripts/build.sh

deps:
	scripts/deps.sh

run: deps build
	scripts/run.sh $(ARGS)

check: deps
	scripts/check.sh $(STAGES)

bench: deps
	scripts/bench.sh $(ARGS)

install:
	$(INSTALL_ENV) scripts/install.sh install

uninstall:
	$(INSTALL_ENV) scripts/install.sh uninstall

# Regenerates dbus/org.bgpolicy.*.xml from the agent's interface descriptions.
dbus-xml: build
	scripts/dbus-xml.sh

clean:
	rm -rf .build .build-release
