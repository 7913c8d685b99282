#ifndef CBGPOLICY_UDEV_SHIM_H
#define CBGPOLICY_UDEV_SHIM_H
#include <libudev.h>
#endif
